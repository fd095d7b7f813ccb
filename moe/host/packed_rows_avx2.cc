// The packed product's rows for avx2 (flags in moe/host/CMakeLists.txt); the code is packed_rows_kernel.inc.
#define SPECGEN_ROWS_ENTRY PackedRowsAvx2
#include "moe/host/packed_rows_kernel.inc"
