// A step's plan as bytes (DESIGN.md §10): what pkv_batch_export_plan writes on the engine that
// decides and pkv_plan_import reads on each rank's pool engine in another process. pkv writes no
// transport; the bytes carry their version, the deciding engine's shape (each field named, so
// a plan of another shape is refused naming what differs), a step number and a checksum.
//
//   header (kPlanHeaderBytes, little-endian fields at fixed offsets: plan_wire.cpp)
//   seq_ids[n] u64, query_start[n+1], positions[t], slot_mapping[t] i64, context_lens[n],
//   block_indptr[n+1], block_indices[block_indptr[n]], last_block_len[n], copy_src[c],
//   copy_dst[c], copy_kind[c], sample_rows[n], state_slots[n] (with STATE layers),
//   group_slot_mapping[g*t] i64 and group_block_tables[g*n*mb] (with g > 1 KV groups);
//   i32 where not said, each array padded to 8 bytes; the checksum is XXH3-64 of the bytes from
//   the step on. block_tables ([n][mb], -1 padded) is block_indices' rows: rebuilt on import.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batch.h"
#include "pkv/pkv.h"

namespace pkv {

// The shape both engines must share, field by field (the order is the wire's).
enum PlanShapeField : uint32_t {
  kShapeNumLayers,
  kShapeNumQHeads,
  kShapeNumKvHeads,
  kShapeHeadDim,
  kShapeDtype,
  kShapeKvDtype,
  kShapeKvLayout,
  kShapeKvLoraRank,
  kShapeQkRopeHeadDim,
  kShapeBlockSize,
  kShapeNumBlocks,
  kShapeHostNumBlocks,
  kShapeTpSize,
  kShapePpSize,
  kShapeNumKvGroups,
  kShapeNumStateSlots,
  kShapeNumHostStateSlots,
  kShapeMaxNumSeqs,
  kShapeLayers,  // a hash of every layer's spec and window
  kPlanShapeFields
};
struct PlanShape {
  uint64_t field[kPlanShapeFields] = {};
};
const char *plan_shape_field_name(uint32_t field);

// The plan of the batch view v, numbered step, of an engine of shape `shape`.
std::vector<uint8_t> encode_plan(const pkv_batch_view &v, uint64_t step, const PlanShape &shape);

// A plan's arrays read back, checked: bytes of another kind, version, shape or a damaged plan
// are refused (PKV_ERR_INVALID_ARGUMENT naming why); every block, slot and copy id is checked
// against `shape`'s pool, so a plan cannot make a pool read or write outside itself.
struct ImportedPlan {
  uint64_t step = 0;
  BatchArrays arrays;
};
ImportedPlan decode_plan(const void *bytes, uint64_t len, const PlanShape &shape);

}  // namespace pkv
