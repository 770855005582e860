# {{project_name}}

An operator on controller-runtime for Rust (`{{runtime_home}}`), scaffolded by
`kubebuilder-rs`, which follows kubebuilder's workflow: `init`, then `create api` for each
kind and `create webhook` for its admission webhooks.

## Getting started

You need a cluster (kind, minikube, a cloud one, or the runtime repository's `make cluster`)
in your kubeconfig, and `kubectl`.

```sh
kubebuilder-rs create api --group <group> --version v1 --kind <Kind>   # a kind and its controller
kubebuilder-rs create webhook --group <group> --version v1 --kind <Kind> --defaulting --programmatic-validation
make manifests      # the CRDs, from the Rust types, into config/crd/bases
make install        # the CRDs into the cluster
make run            # the manager, from your host, against the cluster
kubectl apply -k config/samples
```

`make test` runs the unit tests and the cluster tests against the cluster `KUBECONFIG`
names (they fail when it is not set). `make help` lists every target.

## Deploying

```sh
make docker-build docker-push IMG=<registry>/{{project_name}}:<tag>
make deploy IMG=<registry>/{{project_name}}:<tag>
make undeploy
```

`make deploy` writes a kustomize overlay of `config/default` into `deploy/` (image, and a
webhook serving certificate signed by a CA it makes there) and applies it.

## Layout

| path | what it holds | yours to edit |
|---|---|---|
| `src/api/<version>/<kind>.rs` | the kind's spec and status; its CRD is derived from them | yes |
| `src/controller/<kind>.rs` | the kind's reconciler | yes |
| `src/webhook/<kind>.rs` | the kind's defaulting and validating functions | yes |
| `src/main.rs` | the manager's flags and start | yes |
| `src/lib.rs`, `src/*/mod.rs` | the lists of kinds, controllers and webhooks | above the markers |
| `tests/` | cluster tests, a file per kind | yes |
| `config/` | kustomize manifests: crd, rbac, manager, webhook, samples, default | yes, but `config/crd/bases/` is generated |
| `PROJECT` | what kubebuilder-rs recorded | no |

kubebuilder-rs never overwrites a file: it writes each file you own once, and adds to the
shared lists above `+kubebuilder:scaffold:` marker comments, once per entry. Keep the
markers.

RBAC: `config/rbac/role.yaml` grants each kind's controller its own kind, status and
finalizers, and events; add what your controllers need besides.
