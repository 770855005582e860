#!/bin/sh
# TEST-ONLY exec credential plugin (client.authentication.k8s.io/v1 and v1beta1), used by
# tests/config.rs and the cluster tests. It hands out whatever token it is given; never use
# it for real credentials.
#
# Behaviour comes from the environment:
#   EXEC_PLUGIN_COUNTER     append one line per run to this file, so tests can count runs
#   EXEC_PLUGIN_REQUEST     write the KUBERNETES_EXEC_INFO request it received to this file
#   EXEC_PLUGIN_FAIL        print this on stderr and exit with status 3
#   EXEC_PLUGIN_OUTPUT      print this verbatim instead of a credential
#   EXEC_PLUGIN_TOKEN_FILE  the token is this file's content (wins over EXEC_PLUGIN_TOKEN)
#   EXEC_PLUGIN_TOKEN       the token
#   EXEC_PLUGIN_EXPIRY      status.expirationTimestamp (RFC 3339); no expiry when unset
# The answer carries the request's apiVersion, so both v1 and v1beta1 work.
set -eu

if [ -n "${EXEC_PLUGIN_COUNTER:-}" ]; then
    echo run >>"$EXEC_PLUGIN_COUNTER"
fi
if [ -n "${EXEC_PLUGIN_REQUEST:-}" ]; then
    printf '%s\n' "${KUBERNETES_EXEC_INFO:-}" >"$EXEC_PLUGIN_REQUEST"
fi
if [ -n "${EXEC_PLUGIN_FAIL:-}" ]; then
    printf '%s\n' "$EXEC_PLUGIN_FAIL" >&2
    exit 3
fi
if [ -n "${EXEC_PLUGIN_OUTPUT:-}" ]; then
    printf '%s\n' "$EXEC_PLUGIN_OUTPUT"
    exit 0
fi

if [ -n "${EXEC_PLUGIN_TOKEN_FILE:-}" ]; then
    token=$(cat "$EXEC_PLUGIN_TOKEN_FILE")
else
    token=${EXEC_PLUGIN_TOKEN:-}
fi
if [ -z "$token" ]; then
    echo "exec-plugin.sh: no token; set EXEC_PLUGIN_TOKEN or EXEC_PLUGIN_TOKEN_FILE" >&2
    exit 4
fi

# The request is serialized with apiVersion as its first key.
api_version=$(printf '%s' "${KUBERNETES_EXEC_INFO:-}" |
    sed -n 's/^{"apiVersion":"\([^"]*\)".*/\1/p')
api_version=${api_version:-client.authentication.k8s.io/v1}

expiry=
if [ -n "${EXEC_PLUGIN_EXPIRY:-}" ]; then
    expiry=",\"expirationTimestamp\":\"$EXEC_PLUGIN_EXPIRY\""
fi

printf '{"apiVersion":"%s","kind":"ExecCredential","status":{"token":"%s"%s}}\n' \
    "$api_version" "$token" "$expiry"
