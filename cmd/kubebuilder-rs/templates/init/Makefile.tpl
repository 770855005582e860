# {{project_name}}'s commands, as kubebuilder's Makefile names them. `make help` lists them.
# The cluster targets act on the cluster of the current kubeconfig (KUBECONFIG or
# ~/.kube/config), with kubectl from PATH (override with KUBECTL=...).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# The image `docker-build` makes and `deploy` runs.
IMG ?= controller:latest
CONTAINER_TOOL ?= docker
KUBECTL ?= kubectl
CARGO ?= cargo
# Flags for `make run`, e.g. RUN_ARGS="--namespace=demo --log-level=debug".
RUN_ARGS ?=
# Where `make deploy` writes its kustomize overlay and the webhook's CA and certificate.
DEPLOY_DIR ?= deploy

.PHONY: all help build manifests fmt lint test run install uninstall docker-build docker-push deploy undeploy

all: build

##@ General

help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

manifests: ## Write the CRDs (from the Rust types) to config/crd/bases and the manager's role (from the controllers' rules) to config/rbac/role.yaml.
	$(CARGO) run -q -- crd --dir config/crd/bases
	$(CARGO) run -q -- rbac --file config/rbac/role.yaml

fmt: ## Format the code.
	$(CARGO) fmt

lint: ## Check formatting and run clippy with warnings denied.
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

test: manifests ## Run every test; the cluster tests need a cluster in KUBECONFIG (and fail without one).
	$(CARGO) test -- --include-ignored

##@ Build

build: manifests ## Build the manager binary (target/release/{{project_name}}).
	$(CARGO) build --release

run: manifests ## Run the manager from your host against the current cluster (flags in RUN_ARGS).
	$(CARGO) run -- $(RUN_ARGS)

docker-build: ## Build the manager's image IMG.
	$(CONTAINER_TOOL) build {{docker_build_flags}}-t $(IMG) .

docker-push: ## Push the manager's image IMG.
	$(CONTAINER_TOOL) push $(IMG)

##@ Deployment

install: manifests ## Install the CRDs into the current cluster.
	$(KUBECTL) apply -k config/crd

uninstall: ## Remove the CRDs (and with them every object of the kinds) from the current cluster.
	$(KUBECTL) delete -k config/crd --ignore-not-found

deploy: manifests ## Deploy the manager with image IMG (CRDs, RBAC, Deployment, webhooks with a generated certificate).
	hack/deploy-overlay.sh "$(IMG)" $(DEPLOY_DIR)
	$(KUBECTL) apply -k $(DEPLOY_DIR)

undeploy: ## Remove everything `make deploy` made, its namespace and the CRDs included.
	$(KUBECTL) delete -k config/default --ignore-not-found
