/* gdn_avx2.c - the delta rule compiled for AVX2 + FMA (gdn_body.h). */
#define GDN_ISA avx2
#include "gdn_body.h"
