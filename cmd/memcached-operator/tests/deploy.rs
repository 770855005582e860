//! The operator's deployment manifests (`config/`) against the real cluster: they render in
//! kubebuilder's layout, the API server accepts them as `make deploy` would apply them, the
//! manager's Pod passes the restricted Pod Security Standard, the manager's ClusterRole they
//! grant is exactly the one the code generates (`memcached_operator::rbac_yaml`) and the other
//! roles the rules written down here, the generated rules are enough to run the operator, and
//! removing one breaks it with a clear 403 in its log.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use controller_runtime::client::{Api, DeleteParams, Patch, PatchParams, PostParams};
use controller_runtime::config::{Auth, Secret as Token};
use controller_runtime::runtime::leader_election::LeaderElectionConfig;
use controller_runtime::runtime::{CacheOptions, Manager, ManagerOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use memcached_operator::api::{Memcached, MemcachedSpec, condition};
use memcached_operator::reconcile::FINALIZER;
use serde_json::{Value, json};
use support::cluster::{self, create_namespace};
use support::{CONVERGE, Kubectl, http_get, unique, wait_until};

/// The leader election Role: the elector reads, creates and replaces its Lease.
const LEADER_ELECTION_RULES: &[(&str, &str, &[&str])] = &[(
    "coordination.k8s.io",
    "leases",
    &["create", "get", "update", "watch"],
)];

/// The ClusterRole that lets the operator check who scrapes /metrics: it reviews their
/// tokens and their access, and nothing else.
const METRICS_AUTH_RULES: &[(&str, &str, &[&str])] = &[
    ("authentication.k8s.io", "tokenreviews", &["create"]),
    ("authorization.k8s.io", "subjectaccessreviews", &["create"]),
];

/// The lease name the binary elects on.
const LEASE: &str = "86f835c3.example.com";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `kubectl kustomize dir`, parsed into one JSON value per object.
fn render(kubectl: &Kubectl, dir: &Path) -> Vec<Value> {
    let yaml = kubectl.run(&["kustomize", dir.to_str().unwrap()]);
    serde_saphyr::from_multiple::<Value>(&yaml)
        .unwrap_or_else(|e| panic!("kubectl kustomize {} gave bad YAML: {e}", dir.display()))
}

fn str_at<'v>(value: &'v Value, pointer: &str) -> &'v str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The one object of `kind` named `name`.
fn find<'o>(objects: &'o [Value], kind: &str, name: &str) -> &'o Value {
    let mut found = objects
        .iter()
        .filter(|o| str_at(o, "/kind") == kind && str_at(o, "/metadata/name") == name);
    let one = found
        .next()
        .unwrap_or_else(|| panic!("no {kind} {name} among {}", inventory(objects).join(", ")));
    assert!(found.next().is_none(), "two {kind} {name}");
    one
}

/// `kind namespace/name` of every object, sorted.
fn inventory(objects: &[Value]) -> Vec<String> {
    let mut all: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{} {}/{}",
                str_at(o, "/kind"),
                str_at(o, "/metadata/namespace"),
                str_at(o, "/metadata/name")
            )
        })
        .collect();
    all.sort();
    all
}

/// A role's rules as (apiGroup, resource, verb) triples, so that the same grants written
/// in another grouping compare equal.
fn grants(rules: &Value) -> BTreeSet<(String, String, String)> {
    let strings = |v: &Value, key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .unwrap_or_else(|| panic!("a rule without {key}: {v}"))
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut all = BTreeSet::new();
    for rule in rules.as_array().unwrap() {
        assert!(
            rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none(),
            "unexpected rule shape: {rule}"
        );
        for group in strings(rule, "apiGroups") {
            for resource in strings(rule, "resources") {
                for verb in strings(rule, "verbs") {
                    all.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    all
}

fn expected(rules: &[(&str, &str, &[&str])]) -> BTreeSet<(String, String, String)> {
    rules
        .iter()
        .flat_map(|(group, resource, verbs)| {
            verbs
                .iter()
                .map(|verb| (group.to_string(), resource.to_string(), verb.to_string()))
        })
        .collect()
}

/// Deletes what a test made outside its namespace (and the namespace, and scratch
/// directories) when dropped, also when the test fails halfway.
struct Cleanup<'k> {
    kubectl: &'k Kubectl,
    /// `kind/name` of cluster-scoped objects, and `namespace/<name>` for namespaces.
    objects: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        // A Memcached keeps our finalizer when the operator stopped before it: release it,
        // or its namespace would never finish terminating.
        for object in &self.objects {
            let Some(ns) = object.strip_prefix("namespace/") else {
                continue;
            };
            let listed = self
                .kubectl
                .try_run(&["-n", ns, "get", "memcacheds", "-o", "name"], None);
            for mc in listed.unwrap_or_default().lines() {
                let _ = self.kubectl.try_run(
                    &[
                        "-n",
                        ns,
                        "patch",
                        mc,
                        "--type=merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ],
                    None,
                );
            }
        }
        for object in self.objects.iter().rev() {
            let _ = self.kubectl.try_run(
                &["delete", object, "--ignore-not-found", "--wait=false"],
                None,
            );
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The rules the operator runs with: the manager's ClusterRole and the leader election Role.
struct Rules {
    manager: Value,
    leader_election: Value,
}

/// The rules of the manager's ClusterRole as the code generates them (committed as
/// config/rbac/role.yaml, which tests/manifests.rs keeps in step).
fn generated_manager_rules() -> Value {
    let yaml = memcached_operator::rbac_yaml().expect("the operator's setup registers");
    let role: Value = serde_saphyr::from_str(&yaml).expect("the generated role is YAML");
    role["rules"].clone()
}

/// The generated manager's rules, and the leader election Role of the rendered `config/rbac`.
fn operator_rules(kubectl: &Kubectl) -> Rules {
    let objects = render(kubectl, &repo_root().join("config/rbac"));
    Rules {
        manager: generated_manager_rules(),
        leader_election: find(&objects, "Role", "leader-election-role")["rules"].clone(),
    }
}

/// The service account `memcached-operator` in `ns`, granted `rules` as the manifests grant
/// them (a uniquely named copy of the ClusterRole bound cluster-wide, the leader election
/// Role in `ns`); returns a token for it.
fn grant(cleanup: &mut Cleanup, ns: &str, rules: &Rules) -> String {
    let kubectl = cleanup.kubectl;
    let role = unique("mc-rbac-manager-role");
    let account = "memcached-operator";
    let subject = json!([{"kind": "ServiceAccount", "name": account, "namespace": ns}]);
    cleanup.objects.push(format!("clusterrole/{role}"));
    cleanup.objects.push(format!("clusterrolebinding/{role}"));
    let rbac_group = "rbac.authorization.k8s.io";
    let rbac_v1 = format!("{rbac_group}/v1");
    let role_ref =
        |kind: &str, name: &str| json!({"apiGroup": rbac_group, "kind": kind, "name": name});
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": account, "namespace": ns}},
        {"apiVersion": rbac_v1, "kind": "ClusterRole",
         "metadata": {"name": role}, "rules": rules.manager},
        {"apiVersion": rbac_v1, "kind": "ClusterRoleBinding",
         "metadata": {"name": role}, "subjects": subject,
         "roleRef": role_ref("ClusterRole", &role)},
        {"apiVersion": rbac_v1, "kind": "Role",
         "metadata": {"name": "leader-election", "namespace": ns},
         "rules": rules.leader_election},
        {"apiVersion": rbac_v1, "kind": "RoleBinding",
         "metadata": {"name": "leader-election", "namespace": ns}, "subjects": subject,
         "roleRef": role_ref("Role", "leader-election")},
    ]});
    kubectl.apply(&rbac.to_string());
    let who = format!("--as=system:serviceaccount:{ns}:{account}");
    assert_eq!(
        kubectl.try_run(
            &[
                "auth",
                "can-i",
                "watch",
                "memcacheds.cache.example.com",
                "-A",
                &who
            ],
            None
        ),
        Ok("yes\n".to_owned()),
        "the ClusterRole is bound cluster-wide"
    );
    let token = kubectl.run(&["-n", ns, "create", "token", account, "--duration=1h"]);
    token.trim().to_owned()
}

/// `rules` without `verb` on `resource` of `group` (and without the rule, if that was its
/// last verb).
fn without(rules: &Value, group: &str, resource: &str, verb: &str) -> Value {
    let mut found = false;
    let kept: Vec<Value> = rules
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|rule| {
            let names = |field: &str| -> Vec<&str> {
                rule[field]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default()
            };
            if names("apiGroups") != [group] || names("resources") != [resource] {
                return Some(rule.clone());
            }
            found = true;
            let verbs: Vec<&str> = names("verbs").into_iter().filter(|v| *v != verb).collect();
            let mut rule = rule.clone();
            rule["verbs"] = json!(verbs);
            (!verbs.is_empty()).then_some(rule)
        })
        .collect();
    assert!(found, "no rule for {resource}.{group} in {rules}");
    Value::Array(kept)
}

/// Runs a program to completion; panics with its stderr if it fails.
fn run(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs cluster"]
fn config_default_renders_and_the_api_server_accepts_it_as_make_deploy_applies_it() {
    let kubectl = Kubectl::from_env();
    let root = repo_root();
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("deploy"));
    let ns = unique("mc-deploy");
    kubectl.run(&["create", "namespace", &ns]);
    let _cleanup = Cleanup {
        kubectl: &kubectl,
        objects: vec![format!("namespace/{ns}")],
        dirs: vec![scratch.clone()],
    };

    // config/default: the kubebuilder layout, prefixed and in its own namespace.
    let objects = render(&kubectl, &root.join("config/default"));
    let system = "memcached-operator-system";
    let p = |name: &str| format!("memcached-operator-{name}");
    assert_eq!(
        inventory(&objects),
        [
            format!("ClusterRole /{}", p("manager-role")),
            format!("ClusterRole /{}", p("metrics-auth-role")),
            format!("ClusterRole /{}", p("metrics-reader")),
            format!("ClusterRoleBinding /{}", p("manager-rolebinding")),
            format!("ClusterRoleBinding /{}", p("metrics-auth-rolebinding")),
            "CustomResourceDefinition /memcacheds.cache.example.com".to_owned(),
            format!("Deployment {system}/{}", p("controller-manager")),
            format!(
                "MutatingWebhookConfiguration /{}",
                p("mutating-webhook-configuration")
            ),
            format!("Namespace /{system}"),
            format!("Role {system}/{}", p("leader-election-role")),
            format!("RoleBinding {system}/{}", p("leader-election-rolebinding")),
            format!(
                "Service {system}/{}",
                p("controller-manager-metrics-service")
            ),
            format!("Service {system}/{}", p("webhook-service")),
            format!("ServiceAccount {system}/{}", p("controller-manager")),
            format!(
                "ValidatingWebhookConfiguration /{}",
                p("validating-webhook-configuration")
            ),
        ]
    );
    // The committed CRD, unchanged by the prefix, plus its conversion webhook: /convert on
    // the prefixed webhook Service in the operator's namespace, and v1beta1 served.
    let crd = find(
        &objects,
        "CustomResourceDefinition",
        "memcacheds.cache.example.com",
    );
    let mut committed: Value = serde_saphyr::from_str(&memcached_operator::crd_yaml()).unwrap();
    committed["spec"]["conversion"] = json!({
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"service": {
                "name": p("webhook-service"), "namespace": system, "path": "/convert",
            }},
            "conversionReviewVersions": ["v1"],
        },
    });
    assert_eq!(committed["spec"]["versions"][1]["name"], "v1beta1");
    committed["spec"]["versions"][1]["served"] = json!(true);
    assert_eq!(crd, &committed);

    // The manager: restricted, probed, with its flags, metrics and webhook ports.
    let deployment = find(&objects, "Deployment", &p("controller-manager"));
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["name"], "manager");
    assert_eq!(container["image"], "controller:latest");
    assert_eq!(
        container["args"],
        json!([
            "--metrics-bind-address=:8443",
            "--leader-elect",
            "--health-probe-bind-address=:8081",
        ])
    );
    assert_eq!(
        container["env"],
        json!([
            {"name": "ENABLE_WEBHOOKS", "value": "true"},
            {"name": "MEMCACHED_IMAGE", "value": memcached_operator::DEFAULT_IMAGE}
        ])
    );
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(pod["terminationGracePeriodSeconds"], 10);
    assert_eq!(pod["serviceAccountName"], p("controller-manager"));
    let port = |name: &str| {
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|port| port["name"] == name)
            .unwrap_or_else(|| panic!("no port {name}: {}", container["ports"]))["containerPort"]
            .clone()
    };
    assert_eq!(
        (port("metrics"), port("health"), port("webhook-server")),
        (json!(8443), json!(8081), json!(9443))
    );
    // The metrics Service forwards HTTPS on 8443 to the manager's metrics port.
    let metrics = &find(
        &objects,
        "Service",
        &p("controller-manager-metrics-service"),
    )["spec"];
    assert_eq!(
        (
            &metrics["ports"][0]["name"],
            &metrics["ports"][0]["port"],
            &metrics["ports"][0]["targetPort"]
        ),
        (&json!("https"), &json!(8443), &json!(8443))
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path);
        assert_eq!(container[probe]["httpGet"]["port"], "health");
    }

    // The webhooks call the prefixed Service in the operator's namespace, on the paths the
    // operator serves, and the Service forwards 443 to the webhook port.
    let service = find(&objects, "Service", &p("webhook-service"));
    assert_eq!(
        (
            &service["spec"]["ports"][0]["port"],
            &service["spec"]["ports"][0]["targetPort"]
        ),
        (&json!(443), &json!(9443))
    );
    for (kind, name, path) in [
        (
            "MutatingWebhookConfiguration",
            p("mutating-webhook-configuration"),
            "/mutate-cache-example-com-v1alpha1-memcached",
        ),
        (
            "ValidatingWebhookConfiguration",
            p("validating-webhook-configuration"),
            "/validate-cache-example-com-v1alpha1-memcached",
        ),
    ] {
        let webhook = &find(&objects, kind, &name)["webhooks"][0];
        assert_eq!(
            webhook["clientConfig"]["service"],
            json!({"name": p("webhook-service"), "namespace": system, "path": path}),
            "{kind}"
        );
        assert_eq!(webhook["rules"][0]["resources"], json!(["memcacheds"]));
        assert_eq!(webhook["failurePolicy"], "Fail");
    }

    // What `make deploy IMG=...` applies: the overlay config/deploy-overlay.sh writes.
    let image = "registry.example.com:5000/memcached-operator:v0.1.0";
    let overlay = scratch.join("deploy");
    run(
        root.join("config/deploy-overlay.sh").to_str().unwrap(),
        &[image, overlay.to_str().unwrap()],
    );
    let deployed = render(&kubectl, &overlay);
    let deployment = find(&deployed, "Deployment", &p("controller-manager"));
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], image);
    // The certificate Secret, where the manager mounts it from.
    let secret_name = pod["volumes"][0]["secret"]["secretName"].as_str().unwrap();
    let secret = find(&deployed, "Secret", secret_name);
    assert_eq!(secret["metadata"]["namespace"], system);
    assert_eq!(secret["type"], "kubernetes.io/tls");
    // Base64, folded over lines as kustomize writes long values.
    let b64 = |v: &Value| {
        let text: String = v.as_str().unwrap().split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap()
    };
    std::fs::write(scratch.join("served.crt"), b64(&secret["data"]["tls.crt"])).unwrap();
    // Each webhook configuration trusts the served certificate, which names the Service ...
    let dns = format!("DNS:{}.{system}.svc", p("webhook-service"));
    let names = run(
        "openssl",
        &[
            "x509",
            "-noout",
            "-ext",
            "subjectAltName",
            "-in",
            scratch.join("served.crt").to_str().unwrap(),
        ],
    );
    assert!(names.split([',', ' ', '\n']).any(|n| n == dns), "{names}");
    // ... and so does the CRD's conversion webhook.
    let admission = |kind: &str, name: &str| {
        find(&deployed, kind, &p(name))["webhooks"][0]["clientConfig"].clone()
    };
    let crd = find(
        &deployed,
        "CustomResourceDefinition",
        "memcacheds.cache.example.com",
    );
    let clients = [
        (
            "MutatingWebhookConfiguration",
            admission(
                "MutatingWebhookConfiguration",
                "mutating-webhook-configuration",
            ),
        ),
        (
            "ValidatingWebhookConfiguration",
            admission(
                "ValidatingWebhookConfiguration",
                "validating-webhook-configuration",
            ),
        ),
        (
            "CustomResourceDefinition",
            crd["spec"]["conversion"]["webhook"]["clientConfig"].clone(),
        ),
    ];
    for (kind, client) in clients {
        let ca = scratch.join(format!("{kind}.ca"));
        std::fs::write(&ca, b64(&client["caBundle"])).unwrap();
        run(
            "openssl",
            &[
                "verify",
                "-CAfile",
                ca.to_str().unwrap(),
                scratch.join("served.crt").to_str().unwrap(),
            ],
        );
    }

    // The API server accepts all of it. A server-side dry run creates nothing, not even the
    // Namespace, so the namespaced objects would find no namespace: apply it into the test's
    // own (real) namespace instead, through one more overlay that only sets it.
    let into_test_ns = scratch.join("into-test-namespace");
    std::fs::create_dir_all(&into_test_ns).unwrap();
    std::fs::write(
        into_test_ns.join("kustomization.yaml"),
        format!("resources:\n- ../deploy\nnamespace: {ns}\n"),
    )
    .unwrap();
    let applied = kubectl.run(&[
        "apply",
        "--dry-run=server",
        "-k",
        into_test_ns.to_str().unwrap(),
    ]);
    assert_eq!(
        applied.matches("(server dry run)").count(),
        deployed.len(),
        "{applied}"
    );

    // The manager's Pod is admitted where the restricted Pod Security Standard is enforced
    // (its service account left out: the dry run did not create it).
    kubectl.run(&[
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let mut spec = pod.clone();
    spec.as_object_mut().unwrap().remove("serviceAccountName");
    let manager_pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "manager", "namespace": ns},
        "spec": spec,
    });
    kubectl
        .try_run(
            &["create", "--dry-run=server", "-f", "-"],
            Some(&manager_pod.to_string()),
        )
        .unwrap_or_else(|e| panic!("the manager's Pod is not restricted: {e}"));
}

#[test]
#[ignore = "needs cluster"]
fn the_rendered_roles_grant_exactly_the_expected_rules() {
    let kubectl = Kubectl::from_env();
    let objects = render(&kubectl, &repo_root().join("config/default"));
    // The manager's: what the code generates, rule for rule (the cluster test below runs the
    // operator under them).
    let manager = find(&objects, "ClusterRole", "memcached-operator-manager-role");
    assert_eq!(manager["rules"], generated_manager_rules());
    let leader = find(&objects, "Role", "memcached-operator-leader-election-role");
    assert_eq!(grants(&leader["rules"]), expected(LEADER_ELECTION_RULES));
    let metrics_auth = find(
        &objects,
        "ClusterRole",
        "memcached-operator-metrics-auth-role",
    );
    assert_eq!(grants(&metrics_auth["rules"]), expected(METRICS_AUTH_RULES));
    // What a scraper needs, bound to nobody by the manifests.
    let reader = find(&objects, "ClusterRole", "memcached-operator-metrics-reader");
    assert_eq!(
        reader["rules"],
        json!([{
            "nonResourceURLs": ["/metrics", "/debug/controllers", "/debug/controllers.json"],
            "verbs": ["get"]
        }])
    );
    // Bound to the manager's service account, and nothing else is granted.
    let account = json!([{
        "kind": "ServiceAccount",
        "name": "memcached-operator-controller-manager",
        "namespace": "memcached-operator-system",
    }]);
    for (kind, name, role) in [
        (
            "ClusterRoleBinding",
            "memcached-operator-manager-rolebinding",
            "memcached-operator-manager-role",
        ),
        (
            "RoleBinding",
            "memcached-operator-leader-election-rolebinding",
            "memcached-operator-leader-election-role",
        ),
        (
            "ClusterRoleBinding",
            "memcached-operator-metrics-auth-rolebinding",
            "memcached-operator-metrics-auth-role",
        ),
    ] {
        let binding = find(&objects, kind, name);
        assert_eq!(binding["subjects"], account, "{kind}");
        assert_eq!(binding["roleRef"]["name"], role, "{kind}");
    }
    let rbac: Vec<String> = inventory(&objects)
        .into_iter()
        .filter(|o| {
            let kind = o.split(' ').next().unwrap_or_default();
            kind.ends_with("Role") || kind.ends_with("RoleBinding")
        })
        .collect();
    assert_eq!(
        rbac,
        [
            "ClusterRole /memcached-operator-manager-role",
            "ClusterRole /memcached-operator-metrics-auth-role",
            "ClusterRole /memcached-operator-metrics-reader",
            "ClusterRoleBinding /memcached-operator-manager-rolebinding",
            "ClusterRoleBinding /memcached-operator-metrics-auth-rolebinding",
            "Role memcached-operator-system/memcached-operator-leader-election-role",
            "RoleBinding memcached-operator-system/memcached-operator-leader-election-rolebinding",
        ],
        "no other role or binding"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn the_operator_converges_and_scales_a_memcached_with_only_the_generated_rbac() {
    let kubectl = Kubectl::from_env();
    let admin = cluster::client();
    memcached_operator::install_crd(&admin, CONVERGE)
        .await
        .unwrap();
    let ns = create_namespace(&admin, "mc-rbac").await;
    let mut cleanup = Cleanup {
        kubectl: &kubectl,
        objects: vec![format!("namespace/{ns}")],
        dirs: Vec::new(),
    };

    let rules = operator_rules(&kubectl);
    let token = grant(&mut cleanup, &ns, &rules);
    let mut config = cluster::config();
    config.identity = None;
    config.auth = Auth::Bearer(Token::new(token.trim().to_owned()));

    // The operator as the binary runs it, but for its cache scoped to the test namespace (so
    // that it leaves other tests' resources alone) and its servers on free local ports.
    let options = ManagerOptions {
        cache: memcached_operator::cache_selectors(CacheOptions {
            namespaces: vec![ns.clone()],
            ..CacheOptions::default()
        }),
        leader_election: Some(LeaderElectionConfig::new(LEASE, ns.clone())),
        health_probe_bind_address: Some("127.0.0.1:0".parse().unwrap()),
        ..ManagerOptions::default()
    };
    let manager = Manager::with_config(config, options).unwrap();
    memcached_operator::setup(&manager, memcached_operator::DEFAULT_IMAGE).unwrap();
    let (stop, running) = support::run_manager(&manager);

    // Ready: its caches synced (list, watch); and it leads (the Lease, read and created).
    let probes = manager.probe_addr().await.unwrap();
    wait_until("the manager is ready", CONVERGE, async || {
        let (code, body) = http_get(probes, "/readyz?verbose").await;
        (code == 200).then_some(()).ok_or(format!("{code} {body}"))
    })
    .await;
    let leases = Api::<Lease>::namespaced(admin.clone(), &ns);
    let renewed = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    let first = wait_until("the lease is taken", CONVERGE, async || {
        let lease = leases.get_opt(LEASE).await.map_err(|e| e.to_string())?;
        lease
            .filter(|l| renewed(l).is_some())
            .ok_or("no lease yet".to_owned())
    })
    .await;

    // A Memcached converges: finalizer patched in, Deployment applied at its size, status
    // patched to Available, an event recorded.
    let memcacheds = Api::<Memcached>::namespaced(admin.clone(), &ns);
    let spec = MemcachedSpec {
        size: Some(2),
        container_port: 11211,
        image: None,
    };
    memcacheds
        .create(&PostParams::default(), &Memcached::new("cache", spec))
        .await
        .unwrap();
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &ns);
    let deployment = wait_until("the deployment is applied", CONVERGE, async || {
        let d = deployments
            .get_opt("cache")
            .await
            .map_err(|e| e.to_string())?;
        match d {
            Some(d) => Ok(d),
            // The status says why (a refused write is reported as Degraded).
            None => Err(format!(
                "{:?}",
                memcacheds.get("cache").await.map(|m| m.status)
            )),
        }
    })
    .await;
    assert_eq!(deployment.spec.unwrap().replicas, Some(2));
    let mc = wait_until("the memcached is available", CONVERGE, async || {
        let mc = memcacheds.get("cache").await.map_err(|e| e.to_string())?;
        let status = mc.status.clone().unwrap_or_default();
        let available = status
            .conditions
            .iter()
            .any(|c| c.type_ == condition::AVAILABLE && c.status == "True");
        (available && status.ready_replicas == Some(2) && status.nodes.len() == 2)
            .then_some(mc.clone())
            .ok_or(format!("{:?}", mc.status))
    })
    .await;
    assert!(
        mc.metadata
            .finalizers
            .unwrap()
            .contains(&FINALIZER.to_owned())
    );
    let reasons = async |want: &str| {
        let reasons = cluster::event_reasons(&admin, &ns).await?;
        reasons
            .iter()
            .any(|r| r == want)
            .then_some(())
            .ok_or(format!("{reasons:?}"))
    };
    wait_until("the Created event", CONVERGE, async || {
        reasons("Created").await
    })
    .await;

    // A scale: the cached Deployment is updated with the new replicas (or merge patched when
    // the cache was behind), and a Scaled event recorded.
    memcacheds
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 3}})),
        )
        .await
        .unwrap();
    wait_until("the deployment is scaled", CONVERGE, async || {
        let d = deployments.get("cache").await.map_err(|e| e.to_string())?;
        let replicas = d.spec.and_then(|s| s.replicas);
        if replicas == Some(3) {
            return Ok(());
        }
        let status = memcacheds.get("cache").await.map(|m| m.status);
        Err(format!("{replicas:?} replicas; {status:?}"))
    })
    .await;
    wait_until("the Scaled event", CONVERGE, async || {
        reasons("Scaled").await
    })
    .await;

    // The lease is renewed (replaced) while it leads.
    wait_until("the lease is renewed", CONVERGE, async || {
        let lease = leases.get(LEASE).await.map_err(|e| e.to_string())?;
        (renewed(&lease) != renewed(&first))
            .then_some(())
            .ok_or(format!("{:?}", renewed(&lease)))
    })
    .await;

    // Deletion: the finalizer is patched away, with a Deleting event.
    memcacheds
        .delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the memcached is gone", CONVERGE, async || match memcacheds
        .get_opt("cache")
        .await
        .map_err(|e| e.to_string())?
    {
        None => Ok(()),
        Some(mc) => Err(format!("{:?}", mc.metadata.finalizers)),
    })
    .await;
    wait_until("the Deleting event", CONVERGE, async || {
        reasons("Deleting").await
    })
    .await;

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

/// A kubeconfig for the test cluster that authenticates with `token`, written into `dir`.
fn token_kubeconfig(kubectl: &Kubectl, dir: &Path, token: &str) -> PathBuf {
    let mut config = kubectl.json(&["config", "view", "--raw", "--minify"]);
    config["users"][0]["user"] = json!({ "token": token });
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// The operator binary against `ns` with `kubeconfig`, its log lines collected as they come.
struct Operator {
    child: tokio::process::Child,
    log: std::sync::Arc<parking_lot::Mutex<Vec<String>>>,
}

impl Operator {
    fn start(kubeconfig: &Path, ns: &str) -> Operator {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_memcached-operator"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--namespace",
                ns,
                "--metrics-bind-address=0",
                "--health-probe-bind-address=127.0.0.1:0",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let log = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let lines = log.clone();
        let stderr = child.stderr.take().unwrap();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().push(line);
            }
        });
        Operator { child, log }
    }

    /// Waits for a log line holding every one of `words`, and returns it.
    async fn line_with(&self, words: &[&str]) -> String {
        let what = format!("a log line with {words:?}");
        wait_until(&what, CONVERGE, async || {
            let log = self.log.lock();
            log.iter()
                .find(|line| words.iter().all(|w| line.contains(w)))
                .cloned()
                .ok_or_else(|| format!("last lines: {:?}", &log[log.len().saturating_sub(5)..]))
        })
        .await
    }
}

/// The operator binary in a new namespace named after `prefix`, under a service account
/// holding the rendered rules without `verb` on `resource` of `group`. The cleanup deletes
/// the namespace, the role and the scratch kubeconfig.
async fn operator_without<'k>(
    kubectl: &'k Kubectl,
    rules: &Rules,
    prefix: &str,
    (group, resource, verb): (&str, &str, &str),
) -> (String, Cleanup<'k>, Operator) {
    let ns = create_namespace(&cluster::client(), prefix).await;
    let scratch = std::env::temp_dir().join(unique(prefix));
    let mut cleanup = Cleanup {
        kubectl,
        objects: vec![format!("namespace/{ns}")],
        dirs: vec![scratch.clone()],
    };
    let reduced = Rules {
        manager: without(&rules.manager, group, resource, verb),
        leader_election: rules.leader_election.clone(),
    };
    let token = grant(&mut cleanup, &ns, &reduced);
    let operator = Operator::start(&token_kubeconfig(kubectl, &scratch, &token), &ns);
    (ns, cleanup, operator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn removing_one_rule_breaks_the_operator_with_a_clear_403_in_its_log() {
    let kubectl = Kubectl::from_env();
    let admin = cluster::client();
    memcached_operator::install_crd(&admin, CONVERGE)
        .await
        .unwrap();
    let rules = operator_rules(&kubectl);
    let spec = MemcachedSpec {
        size: Some(1),
        container_port: 11211,
        image: None,
    };

    // Without `create` on Deployments the operator cannot make one: each reconcile fails
    // with the API server's 403, logged, and the resource says Degraded.
    let (ns, cleanup, operator) = operator_without(
        &kubectl,
        &rules,
        "mc-rbac-create",
        ("apps", "deployments", "create"),
    )
    .await;
    let memcacheds = Api::<Memcached>::namespaced(admin.clone(), &ns);
    memcacheds
        .create(
            &PostParams::default(),
            &Memcached::new("cache", spec.clone()),
        )
        .await
        .unwrap();
    let line = operator
        .line_with(&[
            "reconcile failed",
            "403",
            "cannot create resource \"deployments\"",
        ])
        .await;
    assert!(
        line.contains(&format!("system:serviceaccount:{ns}:memcached-operator")),
        "{line}"
    );
    wait_until("the resource is Degraded", CONVERGE, async || {
        let mc = memcacheds.get("cache").await.map_err(|e| e.to_string())?;
        let conditions = mc.status.map(|s| s.conditions).unwrap_or_default();
        conditions
            .iter()
            .find(|c| c.type_ == condition::DEGRADED && c.status == "True")
            .filter(|c| c.message.contains("forbidden"))
            .map(|_| ())
            .ok_or(format!("{conditions:?}"))
    })
    .await;
    drop(operator);
    drop(cleanup);

    // Without `watch` on Pods its cache cannot follow them: the 403 of the watch (and of
    // the streaming list, which is a watch) is logged, naming the kind; the operator keeps
    // retrying with backoff rather than exiting or hanging silently. (Without `list` alone it
    // still works, as the streaming list needs only `watch`; `list` is kept for API servers
    // without streaming lists, where the cache falls back to a LIST.)
    let (ns, cleanup, mut operator) =
        operator_without(&kubectl, &rules, "mc-rbac-watch", ("", "pods", "watch")).await;
    let line = operator
        .line_with(&["403", "cannot watch resource \"pods\""])
        .await;
    assert!(
        line.contains(&format!("system:serviceaccount:{ns}:memcached-operator")),
        "{line}"
    );
    assert!(
        operator.child.try_wait().unwrap().is_none(),
        "still running"
    );
    drop(cleanup);
}
