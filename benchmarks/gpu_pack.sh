#!/usr/bin/env bash
# Pack what a GPU machine without network needs into two carries of < 64 MiB (ignored by git):
#   .gpu-a: site.tar.xz (trl, datasets, bitsandbytes, unsloth, ... unpacked for Python 3.12, trimmed of
#           bitsandbytes' libraries for other CUDA versions and of Unsloth's web studio) + the model's first part
#   .gpu-b: the model's second part and its sha256
# Two calls, back to back, instead of the four of ../shared/gpu/README.md:
#   carry [".gpu-a"]: mkdir -p .site && tar xJf .gpu-a/site.tar.xz -C .site && cp .gpu-a/part /tmp/smollm2.part-a
#   carry [".gpu-b"]: cat /tmp/smollm2.part-a .gpu-b/part > /tmp/smollm2.gguf && bash benchmarks/gpu_session.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
shared=../shared/gpu
[ -d .whl-a ] && [ -d .whl-b ] || "$shared/pack_wheels.sh"
[ -f .mdl-a/part ] && [ -f .mdl-b/part ] || "$shared/pack_model.sh"
for d in .gpu-a .gpu-b; do grep -qx "/$d/" .git/info/exclude || echo "/$d/" >>.git/info/exclude; done
site=$(mktemp -d)
.venv/bin/pip install -q --no-index --no-deps --no-compile --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --target "$site" \
  .whl-a/*.whl $(ls .whl-b/*.whl | grep -v hf_transfer)
rm -rf "$site"/{studio,unsloth_cli,bin}
find "$site/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name '*cuda13*' ! -name '*cpu*' -delete
rm -rf .gpu-a .gpu-b && mkdir -p .gpu-a .gpu-b
tar cJf .gpu-a/site.tar.xz -C "$site" . && rm -rf "$site"
cat .mdl-a/part .mdl-b/part >/tmp/smollm2.gguf
room=$((54 * 1024 * 1024 - $(stat -c %s .gpu-a/site.tar.xz)))  # the tree itself travels too (~2 MiB)
head -c "$room" /tmp/smollm2.gguf >.gpu-a/part
tail -c +"$((room + 1))" /tmp/smollm2.gguf >.gpu-b/part
sha256sum /tmp/smollm2.gguf | cut -d' ' -f1 >.gpu-b/sha256
rm /tmp/smollm2.gguf
du -sh .gpu-a .gpu-b
