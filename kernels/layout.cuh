// layout.cuh: offsets (in floats) of one GPT-2 block in its flat buffer, for the solve() export.
// GENERATED from gpt2block/layout.py (python -m gpt2block.layout > kernels/layout.cuh); do not edit.
#pragma once

#define BLOCK_D 768
#define O_LN1_G 0  // 768
#define O_LN1_B 768  // 768
#define O_W_QKV 1536  // 768 x 2304
#define O_B_QKV 1771008  // 2304
#define O_W_ATTN 1773312  // 768 x 768
#define O_B_ATTN 2363136  // 768
#define O_LN2_G 2363904  // 768
#define O_LN2_B 2364672  // 768
#define O_W_FC 2365440  // 768 x 3072
#define O_B_FC 4724736  // 3072
#define O_W_PROJ 4727808  // 3072 x 768
#define O_B_PROJ 7087104  // 768
#define BLOCK_NUMEL 7087872
