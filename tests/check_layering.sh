#!/usr/bin/env bash
# The include rules of docs/DESIGN.md §1, checked on the source tree:
#   engine/      reaches transports only through transports/transport.h, registry.h and
#                host_channel.h (never tcp/, unix/, stream/), and never preload/ or tools/;
#   transports/  never includes preload/ or tools/;
#   conf/        includes only conf/ and engine/sys.h (raw system calls);
#   sdp/         (the SDP socket rules) includes none of engine/, transports/, preload/, tools/,
#                and neither engine/ nor transports/ include it;
#   sdp_relay/   (SDP connections over verbs, relayed to the applications' sockets) includes
#                sdp/, engine/log.h, engine/sys.h and engine/errors.h, transports/verbs' loader, and
#                nothing else of engine/, transports/, preload/ or tools/; only preload/ and
#                tests include it.
# Usage: check_layering.sh SOURCE_ROOT [STAMP]: STAMP is written when the rules hold (the build
# runs it on every ninja, so an include against the layering fails the build).
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
stamp="${2:-}"
[ -z "$stamp" ] || stamp="$(realpath -m "$stamp")"
cd "$root"
bad=0
check() {  # folder, forbidden-include regex, rule
  local hits
  hits=$(grep -rnE "^#include \"($2)" "$1" --include='*.h' --include='*.cc' || true)
  if [ -n "$hits" ]; then
    echo "layering: $1 must not include $3:"
    echo "$hits"
    bad=1
  fi
}
check engine 'transports/(tcp|unix|stream)/|preload/|tools/' 'a transport'"'"'s own headers, preload/ or tools/'
check transports 'preload/|tools/' 'preload/ or tools/'
check engine 'sdp/' 'sdp/ (the SDP API is the preload layer'"'"'s, DESIGN.md §11)'
check transports 'sdp/' 'sdp/'
check sdp 'engine/|transports/|preload/|tools/' 'the RDS layers, preload/ or tools/'
check sdp 'sdp_relay/' 'sdp_relay/'
check engine 'sdp_relay/' 'sdp_relay/'
check transports 'sdp_relay/' 'sdp_relay/'
check sdp_relay 'engine/[^els]|engine/l[^o]|engine/s[^y]|engine/e[^r]|transports/[^v]|transports/v[^e]|preload/|tools/' \
  'anything of the RDS layers but engine/log.h, sys.h, errors.h and transports/verbs/'
check conf 'engine/[^s]|engine/s[^y]|preload/|transports/|tools/' 'anything but conf/ and engine/sys.h'
if [ "$bad" = 0 ] && [ -n "$stamp" ]; then : >"$stamp"; fi
exit "$bad"
