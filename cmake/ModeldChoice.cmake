# gpubox_choose_modeld(TORCH_FOUND OUT): whether to build gpubox-modeld, in OUT (ON/OFF).
#
# GPUBOX_BUILD_MODELD is AUTO (the default), ON or OFF. AUTO builds it when
# LibTorch was found; under CI=true (whose setup installs LibTorch) AUTO
# without LibTorch is a fatal error, whatever an earlier configure left in the
# cache: only an explicit OFF (-DGPUBOX_BUILD_MODELD=OFF, as the asan and fuzz
# presets give) builds without the model host. ON without LibTorch is fatal.
# A cache written by the option() of earlier versions, where LibTorch is still
# missing, is read as AUTO: its OFF was that option's default on a machine
# without LibTorch, which skipped the check above (with LibTorch found, its
# value stands: it cannot be told from a preset's OFF).
set(GPUBOX_MODELD_LEGACY_HELP "Build gpubox-modeld (needs LibTorch: a PyTorch 2.x wheel)")
function(gpubox_choose_modeld torch_found out)
  if(DEFINED CACHE{GPUBOX_BUILD_MODELD})
    get_property(help CACHE GPUBOX_BUILD_MODELD PROPERTY HELPSTRING)
    if(help STREQUAL GPUBOX_MODELD_LEGACY_HELP AND NOT torch_found)
      set(GPUBOX_BUILD_MODELD AUTO CACHE STRING "" FORCE)
    endif()
  endif()
  set(GPUBOX_BUILD_MODELD AUTO CACHE STRING "Build gpubox-modeld: AUTO (when LibTorch is found), ON or OFF")
  set_property(CACHE GPUBOX_BUILD_MODELD PROPERTY HELPSTRING "Build gpubox-modeld: AUTO (when LibTorch is found), ON or OFF")
  set_property(CACHE GPUBOX_BUILD_MODELD PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${GPUBOX_BUILD_MODELD}" choice)
  if(choice STREQUAL "AUTO")
    if(NOT torch_found AND "$ENV{CI}" STREQUAL "true")
      message(FATAL_ERROR "CI=true, and no LibTorch at '${GPUBOX_TORCH_DIR}': run scripts/setup_python.sh "
                          "(or configure with -DGPUBOX_BUILD_MODELD=OFF to build without the model host)")
    endif()
    set(${out} ${torch_found} PARENT_SCOPE)
  elseif(choice STREQUAL "OFF" OR choice STREQUAL "FALSE" OR choice STREQUAL "0" OR choice STREQUAL "NO")
    set(${out} OFF PARENT_SCOPE)
  elseif(choice STREQUAL "ON" OR choice STREQUAL "TRUE" OR choice STREQUAL "1" OR choice STREQUAL "YES")
    if(NOT torch_found)
      message(FATAL_ERROR "GPUBOX_BUILD_MODELD is ON but ${GPUBOX_TORCH_DIR}/lib/libtorch_cpu.so does not exist")
    endif()
    set(${out} ON PARENT_SCOPE)
  else()
    message(FATAL_ERROR "GPUBOX_BUILD_MODELD '${GPUBOX_BUILD_MODELD}': expected AUTO, ON or OFF")
  endif()
endfunction()
