# The Modal backend's sources, added to gpubox_host by host/CMakeLists.txt.
target_sources(gpubox_host PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/modal.cpp
  ${CMAKE_CURRENT_LIST_DIR}/modal_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/modal_flags.cpp)
