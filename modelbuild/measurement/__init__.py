"""Running a built library to measure it: the script the validate stage starts as a fresh process, and the
client of a device reached over TVM's RPC tracker."""
