//! kubebuilder-rs end to end on the real cluster: a project scaffolded in a temporary
//! directory (init, create api, create webhook --defaulting), built on this repository's
//! target directory, its CRD installed with `make install`, its manager run with its webhook
//! server on 127.0.0.1 (a throwaway certificate, registered with the API server by URL), and
//! its sample applied: the API server defaults it through the webhook and the scaffolded
//! reconcile adds the finalizer and the `Available` condition. `make manifests` writes the
//! CRD and the RBAC role generated from the controller's rules, and again changes nothing.
//! Then a second version and its conversion webhook: a Ship written as v2 is read back as
//! v1, reconciled, and as v2. Then the project's own
//! `make test` runs against the same cluster, and its deployment manifests pass a server-side
//! dry run.
//!
//! Prints the time from `init` to the sample's first reconcile.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use base64::Engine;
use serde_json::{Value, json};
use support::certs::{TempDir, WebhookConfigurations, issue, make_ca};
use support::cluster;
use support::{CONVERGE, Kubectl, free_port, unique, wait_ready, wait_until};

/// The target directory this test was built in (`<target>/debug/deps/scaffold-..`): the
/// scaffolded project builds there too, so only the project's own crate is compiled.
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return absolute(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .nth(3)
        .expect("<target>/debug/deps/<test>")
        .to_owned()
}

fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        path
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path)
    }
}

/// Runs `program` with `args` in `dir`; panics with its output when it fails.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut command = Command::new(program);
    command.current_dir(dir).args(args);
    // Not the jobserver of a `make test-cluster` this test may run under, nor the variables
    // cargo set for this test (CARGO_PKG_NAME, ...): build scripts such as ring's rerun when
    // those change, so a build from here would not be reused by one from a shell.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let cargo_set = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
        ];
        if cargo_set.iter().any(|p| key.starts_with(p))
            || ["MAKEFLAGS", "MFLAGS", "MAKELEVEL"].contains(&key.as_ref())
        {
            command.env_remove(key.as_ref());
        }
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{program} {} in {}: {}\n{stdout}\n{}",
        args.join(" "),
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Every file under `dir` and its bytes.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Removes what the test put on the cluster, even when it fails: the objects of the CRD
/// (their finalizers first, since no controller may be left to remove them), the CRD, and
/// the namespaces.
struct Cleanup<'k> {
    kubectl: &'k Kubectl,
    /// `<plural>.<group>`.
    crd: String,
    namespaces: Vec<String>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let listed = self.kubectl.try_run(
            &[
                "get",
                &self.crd,
                "-A",
                "-o",
                "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{\"\\n\"}{end}",
            ],
            None,
        );
        for line in listed.unwrap_or_default().lines() {
            if let Some((ns, name)) = line.split_once(' ') {
                let _ = self.kubectl.try_run(
                    &[
                        "-n",
                        ns,
                        "patch",
                        &self.crd,
                        name,
                        "--type=merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ],
                    None,
                );
            }
        }
        let _ = self.kubectl.try_run(
            &[
                "delete",
                "crd",
                &self.crd,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
        for ns in &self.namespaces {
            let _ = self.kubectl.try_run(
                &[
                    "delete",
                    "namespace",
                    ns,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cluster"]
async fn a_scaffolded_operator_defaults_and_reconciles_its_sample() {
    let kubectl = Kubectl::from_env();
    let kubeconfig = cluster::kubeconfig();
    let kubectl_bin = std::env::var("TESTENV_KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    let client = cluster::client();
    let target = target_dir();
    let scratch = TempDir::new("kubebuilder-rs-scaffold");
    // Unique per run: the CRD and the deployment namespace are cluster-wide.
    let id = std::process::id();
    let domain = format!("s{id}.scaffold.example.com");
    let name = format!("yard-{id}");
    let project = scratch.join(&name);
    let (group, full_group) = ("fleet".to_owned(), format!("fleet.{domain}"));
    let crd = format!("ships.{full_group}");
    let mut cleanup = Cleanup {
        kubectl: &kubectl,
        crd: crd.clone(),
        namespaces: Vec::new(),
    };
    let kb = env!("CARGO_BIN_EXE_kubebuilder-rs");
    let env: &[(&str, &Path)] = &[("CARGO_TARGET_DIR", &target), ("KUBECONFIG", &kubeconfig)];

    // The workflow, as a user types it.
    let begin = Instant::now();
    run(
        scratch.path(),
        kb,
        &["init", "--domain", &domain, "--dir", &name],
        &[],
    );
    let gvk = ["--group", "fleet", "--version", "v1", "--kind", "Ship"];
    run(&project, kb, &[&["create", "api"][..], &gvk].concat(), &[]);
    run(
        &project,
        kb,
        &[&["create", "webhook"][..], &gvk, &["--defaulting"]].concat(),
        &[],
    );
    run(&project, "make", &["manifests"], env);
    assert!(
        project
            .join(format!("config/crd/bases/{full_group}_ships.yaml"))
            .is_file()
    );
    // The role, generated from the controller's rules: the finalizer and status patches.
    let role = std::fs::read_to_string(project.join("config/rbac/role.yaml")).unwrap();
    assert!(role.contains("  - ships/status\n"), "{role}");
    assert!(role.contains(&format!("  - {full_group}\n")), "{role}");
    // Generated again, nothing changes.
    let config = snapshot(&project.join("config"));
    run(&project, "make", &["manifests"], env);
    assert!(
        snapshot(&project.join("config")) == config,
        "make manifests changed config/"
    );
    let kubectl_var = format!("KUBECTL={kubectl_bin}");
    run(&project, "make", &["install", &kubectl_var], env);

    // The manager, its webhooks served on 127.0.0.1 with a certificate from a throwaway CA.
    let ns = cluster::create_namespace(&client, "kb-scaffold").await;
    cleanup.namespaces.push(ns.clone());
    let certs = scratch.join("certs");
    std::fs::create_dir(&certs).unwrap();
    let ca = make_ca(&certs, "ca");
    let (crt, key) = issue(&certs, "ca", "serving");
    std::fs::copy(&crt, certs.join("tls.crt")).unwrap();
    std::fs::copy(&key, certs.join("tls.key")).unwrap();
    let (probes, webhooks) = (free_port(), free_port());
    let log = scratch.join("manager.log");
    let mut manager = tokio::process::Command::new(target.join("debug").join(&name))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--namespace",
            &ns,
            "--metrics-bind-address=0",
            "--enable-webhooks",
        ])
        .arg(format!("--health-probe-bind-address=127.0.0.1:{probes}"))
        .arg(format!("--webhook-port={webhooks}"))
        .arg("--cert-dir")
        .arg(&certs)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_ready(format!("127.0.0.1:{probes}").parse().unwrap()).await;

    let configuration = unique("kb-scaffold");
    let webhook_guard = WebhookConfigurations {
        kubectl: &kubectl,
        name: configuration.clone(),
    };
    let path = format!("/mutate-{}-v1-ship", full_group.replace('.', "-"));
    kubectl.apply(
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": configuration},
            "webhooks": [{
                "name": format!("mship-v1.{full_group}"),
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{webhooks}{path}"),
                    "caBundle": base64::engine::general_purpose::STANDARD
                        .encode(std::fs::read(&ca).unwrap()),
                },
                "rules": [{
                    "operations": ["CREATE", "UPDATE"],
                    "apiGroups": [full_group],
                    "apiVersions": ["v1"],
                    "resources": ["ships"],
                    "scope": "Namespaced",
                }],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }],
        })
        .to_string(),
    );

    // The sample, once the API server calls the webhook (a dry run goes through admission
    // and stores nothing).
    let sample = project.join(format!("config/samples/{group}_v1_ship.yaml"));
    let sample = sample.to_str().unwrap();
    wait_until("the webhook defaulting a dry run", CONVERGE, async || {
        let dry = kubectl.try_json(&["-n", &ns, "create", "--dry-run=server", "-f", sample])?;
        match dry.pointer("/spec/foo") {
            Some(Value::String(foo)) if foo == "default" => Ok(()),
            other => Err(format!("spec.foo {other:?}")),
        }
    })
    .await;
    kubectl.run(&["-n", &ns, "apply", "-f", sample]);
    let finalizer = format!("{full_group}/finalizer");
    let reconciled = wait_until(
        "the sample defaulted and reconciled",
        CONVERGE,
        async || {
            let ship = kubectl.try_json(&["-n", &ns, "get", &crd, "ship-sample"])?;
            let foo = ship.pointer("/spec/foo").and_then(Value::as_str);
            let finalized = ship
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| f.iter().any(|f| f.as_str() == Some(finalizer.as_str())));
            let generation = ship.pointer("/metadata/generation").cloned();
            let available = ship
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
                .is_some_and(|c| {
                    c["status"] == "True" && Some(&c["observedGeneration"]) == generation.as_ref()
                });
            if foo == Some("default") && finalized && available {
                Ok(ship)
            } else {
                Err(ship.to_string())
            }
        },
    )
    .await;
    let elapsed = begin.elapsed();
    eprintln!(
        "kubebuilder-rs: init to the sample's first reconcile: {:.1} s (target dir {})",
        elapsed.as_secs_f64(),
        target.display()
    );
    assert_eq!(reconciled["spec"]["foo"], "default");

    // Deleting it completes: the reconcile removes the finalizer.
    kubectl.run(&["-n", &ns, "delete", &crd, "ship-sample", "--wait=false"]);
    wait_until("the sample gone", CONVERGE, async || {
        let args = [
            "-n",
            &ns,
            "get",
            &crd,
            "ship-sample",
            "--ignore-not-found",
            "-o",
            "name",
        ];
        match kubectl.try_run(&args, None)? {
            left if left.trim().is_empty() => Ok(()),
            left => Err(left),
        }
    })
    .await;
    manager.start_kill().unwrap();
    let _ = manager.wait().await;

    // The project's own tests, against the same cluster, its webhook no longer called.
    drop(webhook_guard);
    let tested = run(&project, "make", &["test"], env);
    assert!(
        tested.contains("test a_ship_is_reconciled_and_its_deletion_completes ... ok"),
        "{tested}"
    );

    // A second version and the conversion webhook: an object written as v2 is stored as v1
    // (the hub) and read back as either, through the API server.
    let v2 = ["--group", "fleet", "--version", "v2", "--kind", "Ship"];
    run(&project, kb, &[&["create", "api"][..], &v2].concat(), &[]);
    run(
        &project,
        kb,
        &[&["create", "webhook"][..], &gvk, &["--conversion"]].concat(),
        &[],
    );
    run(&project, "make", &["install", &kubectl_var], env);
    let mut manager = tokio::process::Command::new(target.join("debug").join(&name))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--namespace",
            &ns,
            "--metrics-bind-address=0",
            "--enable-webhooks",
        ])
        .arg(format!("--health-probe-bind-address=127.0.0.1:{probes}"))
        .arg(format!("--webhook-port={webhooks}"))
        .arg("--cert-dir")
        .arg(&certs)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(scratch.join("manager-2.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_ready(format!("127.0.0.1:{probes}").parse().unwrap()).await;
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&ca).unwrap());
    let conversion = json!([
        {"op": "replace", "path": "/spec/conversion", "value": {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{webhooks}/convert"),
                    "caBundle": ca_bundle,
                },
                "conversionReviewVersions": ["v1"],
            },
        }},
        {"op": "replace", "path": "/spec/versions/1/served", "value": true},
    ]);
    kubectl.run(&[
        "patch",
        "crd",
        &crd,
        "--type=json",
        "-p",
        &conversion.to_string(),
    ]);
    let (v1, v2) = (
        format!("ships.v1.{full_group}"),
        format!("ships.v2.{full_group}"),
    );
    let ship = json!({
        "apiVersion": format!("{full_group}/v2"),
        "kind": "Ship",
        "metadata": {"name": "ship-v2", "namespace": ns},
        "spec": {"foo": "converted"},
    });
    let ship = ship.to_string();
    wait_until("a v2 Ship created", CONVERGE, async || {
        kubectl.try_run(&["apply", "-f", "-"], Some(&ship))
    })
    .await;
    wait_until("the v2 Ship read as v1, reconciled", CONVERGE, async || {
        let as_v1 = kubectl.try_json(&["-n", &ns, "get", &v1, "ship-v2"])?;
        let available = as_v1
            .pointer("/status/conditions/0/status")
            .and_then(Value::as_str);
        if as_v1["apiVersion"] == format!("{full_group}/v1")
            && as_v1["spec"]["foo"] == "converted"
            && available == Some("True")
        {
            Ok(())
        } else {
            Err(as_v1.to_string())
        }
    })
    .await;
    let as_v2 = kubectl.json(&["-n", &ns, "get", &v2, "ship-v2"]);
    assert_eq!(as_v2["apiVersion"], format!("{full_group}/v2"));
    assert_eq!(as_v2["spec"]["foo"], "converted");
    assert_eq!(as_v2["status"]["conditions"][0]["type"], "Available");
    kubectl.run(&["-n", &ns, "delete", &v1, "ship-v2", "--wait=false"]);
    wait_until("the v2 Ship gone", CONVERGE, async || {
        let args = [
            "-n",
            &ns,
            "get",
            &v1,
            "ship-v2",
            "--ignore-not-found",
            "-o",
            "name",
        ];
        match kubectl.try_run(&args, None)? {
            left if left.trim().is_empty() => Ok(()),
            left => Err(left),
        }
    })
    .await;
    manager.start_kill().unwrap();
    let _ = manager.wait().await;
    // The webhook gone, the CRD converts no more (and the deployment's CRD below names the
    // webhook by its Service, which a URL beside it would make invalid).
    let none =
        json!([{"op": "replace", "path": "/spec/conversion", "value": {"strategy": "None"}}]);
    kubectl.run(&["patch", "crd", &crd, "--type=json", "-p", &none.to_string()]);

    // Its deployment, rendered by `make deploy`'s overlay script, passes a server-side dry
    // run (no image is pulled: nothing is created).
    let deploy = scratch.join("deploy");
    run(
        &project,
        "hack/deploy-overlay.sh",
        &["registry.example.com/yard:v0.1.0", deploy.to_str().unwrap()],
        &[],
    );
    let system = format!("{name}-system");
    kubectl.run(&["create", "namespace", &system]);
    cleanup.namespaces.push(system);
    let applied = kubectl.run(&["apply", "--dry-run=server", "-k", deploy.to_str().unwrap()]);
    for object in [
        format!("deployment.apps/{name}-controller-manager"),
        format!(
            "mutatingwebhookconfiguration.admissionregistration.k8s.io/{name}-mutating-webhook-configuration"
        ),
        format!("clusterrole.rbac.authorization.k8s.io/{name}-manager-role"),
        "secret/webhook-server-cert".to_owned(),
    ] {
        assert!(
            applied.contains(&object),
            "{object} missing from:\n{applied}"
        );
    }
    let rendered = kubectl.run(&["kustomize", deploy.to_str().unwrap()]);
    assert!(rendered.contains("caBundle: "), "{rendered}");
    // The CRD's conversion webhook trusts the same CA as the admission webhooks.
    let crd_doc = rendered
        .split("\n---\n")
        .find(|doc| doc.contains("kind: CustomResourceDefinition"))
        .unwrap_or_else(|| panic!("no CRD in:\n{rendered}"));
    assert!(
        crd_doc.contains("strategy: Webhook") && crd_doc.contains("caBundle: "),
        "the CRD's conversion webhook has no caBundle:\n{crd_doc}"
    );
    assert!(
        rendered.contains("image: registry.example.com/yard:v0.1.0"),
        "{rendered}"
    );

    run(&project, "make", &["uninstall", &kubectl_var], env);
    drop(cleanup);
}
