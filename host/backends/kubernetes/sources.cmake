# The Kubernetes backend's sources, added to gpubox_host by host/CMakeLists.txt.
target_sources(gpubox_host PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/kubernetes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kubernetes_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kubernetes_flags.cpp)
