# Sourced by the recorders here: `testenv_pki KUBECONFIG DIR` writes the kubeconfig's CA,
# client certificate and key to DIR/{ca,cert,key}.pem, for curl, and prints its server URL.
testenv_pki() {
  python3 - "$1" "$2" <<'PY'
import base64, sys, yaml
k = yaml.safe_load(open(sys.argv[1]))
cluster, user = k["clusters"][0]["cluster"], k["users"][0]["user"]
for name, field in [("ca", cluster["certificate-authority-data"]),
                    ("cert", user["client-certificate-data"]), ("key", user["client-key-data"])]:
    open(f"{sys.argv[2]}/{name}.pem", "wb").write(base64.b64decode(field))
print(cluster["server"])
PY
}
