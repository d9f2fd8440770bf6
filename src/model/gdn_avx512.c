/* gdn_avx512.c - the delta rule compiled for AVX-512 (gdn_body.h). */
#define GDN_ISA avx512
#include "gdn_body.h"
