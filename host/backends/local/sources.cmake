# The local backend's sources, added to gpubox_host by host/CMakeLists.txt.
target_sources(gpubox_host PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/capabilities.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpu_devices.cpp
  ${CMAKE_CURRENT_LIST_DIR}/layer_archive.cpp
  ${CMAKE_CURRENT_LIST_DIR}/local.cpp
  ${CMAKE_CURRENT_LIST_DIR}/local_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/local_snapshot.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runtime_binds.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sandbox_root.cpp
  ${CMAKE_CURRENT_LIST_DIR}/user_namespace.cpp)
