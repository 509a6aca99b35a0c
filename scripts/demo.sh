#!/usr/bin/env bash
# What the main job shows once it is built (scripts/run.sh builds, then runs this): the shipped model
# (models/pystdlib-6m) writes a Python function through mk-chat, greedily, so that the text is the same on
# every run (and on the GPU and the emulator, up to near-ties); with a GPU build, then the speed at a real
# shape (Llama-3.2-1B's shapes, random weights): mk-run's summary line and mk-bench's line at context 1024.
#   scripts/demo.sh BUILD_DIR        BUILD_DIR: build-none or build-nvidia, with mk-chat (and mk-run,
#                                    mk-bench for a GPU build) built
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/demo.sh BUILD_DIR}
chat=$build/host/tools/mk-chat
[[ -x $chat ]] || { echo "demo: $chat is not built (scripts/run.sh builds it)" >&2; exit 2; }
prompt="Write a Python function read_lines(path). Return the lines of the file at path, without their newlines."
printf '> %s\n' "$prompt"
"$chat" --temp 0 -n 200 -p "$prompt"
if [[ -x $build/bench/mk-bench ]]; then
  "$build/host/tools/mk-run" --preset llama-3.2-1b -n 128 -c 2048 -q
  "$build/bench/mk-bench" --preset llama-3.2-1b --depths 1024 -n 128 -r 3
fi
echo
echo "built in $build: host/tools/mk-chat (chat; -m MODEL_DIR for another model), host/tools/mk-run (raw"
echo "completion: -m MODEL_DIR -p TEXT), host/server/mk-server (OpenAI API: -m MODEL_DIR --port 8080)"
