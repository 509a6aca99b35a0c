// The one list of instruction kinds (ops). Adding an op means a line here and the files it names:
//   X(Enum, name): Op::Enum in the schedule (runtime/schedule.h), "name" in diagnostics and profiles,
//   device/ops/<name>.h   its spec (weights streamed, shared memory) and its kernel body (Enum##Op),
//   host/emulator/ops/<name>.cpp   its CPU twin (emulate_<name>),
//   runtime/schedule.cpp  where its instructions go in a step and what they wait for.
// The kernel's dispatch, the weight stream, the host's shared-memory plan and the emulator's dispatch are
// all generated from this list. The order is the canonical order of one step's stages.
#pragma once

#define MK_FOR_EACH_OP(X) \
  X(Embed, embed)         \
  X(QKV, qkv)             \
  X(Attention, attention) \
  X(OProj, o_proj)        \
  X(GateUp, gate_up)      \
  X(Down, down)           \
  X(LMHead, lm_head)      \
  X(Sample, sample)
