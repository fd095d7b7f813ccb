// GraphedDraftHooks: the launch choices a benchmark varies to measure GraphedDraft one way against
// another. Passed at creation (GraphedDraft::Create); the product passes none and gets the defaults,
// which are the draft's own choices. Not options for users: some of them make the logits not the
// model's.
#pragma once

namespace specgen {

struct GraphedDraftHooks {
  // Launch (and capture) without programmatic dependent launch even where the device takes it.
  bool disable_programmatic_launch = false;
  // The fused GEMVs' grid bound, in blocks of 256 threads per multiprocessor (8: a full one). >= 1.
  int gemv_blocks_per_sm = 8;
  // > 0: one GEMV shape at every position instead of the draft's choice by position: the rows (QKV)
  // and row pairs (gate/up, at least 1) each warp loads before its wait, the O and down projections as
  // the short-context shape has them. 0: the draft's choice.
  int qkv_rows_per_warp = 0;
  int gate_up_rows_per_warp = 0;
  // Every layer reads layer 0's weights (one layer's weights then stay in L2 from layer to layer): the
  // decode with its weights out of HBM's way. The logits are then not the model's.
  bool share_layer_weights = false;
};

}  // namespace specgen
