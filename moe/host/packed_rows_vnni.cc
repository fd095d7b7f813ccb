// The packed product's rows for vnni (flags in moe/host/CMakeLists.txt); the code is packed_rows_kernel.inc.
#define SPECGEN_ROWS_ENTRY PackedRowsAvx512Vnni
#include "moe/host/packed_rows_kernel.inc"
