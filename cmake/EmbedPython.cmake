# Python shipped inside a binary as C++ raw strings, written once for every
# embed: the gpubox package for notebook cells (kernel/), the serve worker's
# package (agent/), the executor's package and the model loader (kernel/).
# The sources are read at configure time and re-read whenever one of them
# changes.

set(GPUBOX_EMBED_PYTHON_DIR ${CMAKE_CURRENT_LIST_DIR})

# The C++ raw-string form of one file's text, in out_var; refuses a text
# holding the string's delimiter.
function(_gpubox_python_literal file out_var)
  file(READ ${file} source)
  string(FIND "${source}" ")gpubox_py\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${file} holds )gpubox_py\", the delimiter of the raw string it is embedded in")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  set(${out_var} "R\"gpubox_py(${source})gpubox_py\"" PARENT_SCOPE)
endfunction()

# gpubox_embed_python_package(OUTPUT cpp NAMESPACE ns FUNCTION fn HEADER h FILES py...)
# writes OUTPUT, defining `const std::vector<std::pair<std::string, std::string>>& ns::fn()`
# (declared in HEADER): (module name, source) of each file in the order given,
# the name being the file's without ".py" ("__init__", "__main__" included).
function(gpubox_embed_python_package)
  cmake_parse_arguments(EMBED "" "OUTPUT;NAMESPACE;FUNCTION;HEADER" "FILES" ${ARGN})
  set(EMBED_ENTRIES "")
  foreach(file ${EMBED_FILES})
    get_filename_component(module ${file} NAME_WE)
    _gpubox_python_literal(${file} literal)
    string(APPEND EMBED_ENTRIES "      {\"${module}\", ${literal}},\n")
  endforeach()
  configure_file(${GPUBOX_EMBED_PYTHON_DIR}/embedded_package.cpp.in ${EMBED_OUTPUT} @ONLY)
endfunction()

# gpubox_embed_python_file(OUTPUT cpp NAMESPACE ns NAME name HEADER h FILE py)
# writes OUTPUT, defining `const char ns::name[]` (declared in HEADER): the file's text.
function(gpubox_embed_python_file)
  cmake_parse_arguments(EMBED "" "OUTPUT;NAMESPACE;NAME;HEADER;FILE" "" ${ARGN})
  _gpubox_python_literal(${EMBED_FILE} EMBED_LITERAL)
  file(RELATIVE_PATH EMBED_SOURCE ${CMAKE_SOURCE_DIR} ${EMBED_FILE})
  configure_file(${GPUBOX_EMBED_PYTHON_DIR}/embedded_file.cpp.in ${EMBED_OUTPUT} @ONLY)
endfunction()
