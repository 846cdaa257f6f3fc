//! Valid manifests: the shipped example parses, defaults are filled, names are normalized, and
//! `load` checks the disk.

use std::fs;
use std::path::Path;

use af_manifest::{
    CannedResponse, CaptureRule, DatabaseProvider, EgressPolicy, EnvValue, HostRule, ImageSource,
    MailPolicy, ManifestCode, Provider,
};

fn example_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/shop/af.yaml")
}

#[test]
fn the_shop_example_is_valid_and_means_what_it_says() {
    let manifest = af_manifest::load(example_path()).unwrap();
    assert_eq!(manifest.name, "shop");
    assert_eq!(manifest.runtime.provider, Provider::Local);
    assert_eq!(
        manifest.runtime.domain.as_deref(),
        Some("preview.shop.example")
    );

    let web = &manifest.services["web"];
    assert!(
        matches!(&web.source, ImageSource::Build { context, .. } if context.ends_with("image")),
        "{:?}",
        web.source
    );
    assert_eq!(web.port, Some(8080));
    assert!(web.web);
    assert_eq!(web.replicas, 2);
    assert_eq!(web.resources.cpu.as_ref().unwrap().milli_value(), 250);
    assert_eq!(
        web.resources.memory.as_ref().unwrap().value_rounded_up(),
        128 << 20
    );
    assert_eq!(
        web.migrate.as_deref(),
        Some(&["/shop".to_string(), "migrate".to_string()][..])
    );
    assert_eq!(web.depends_on, vec!["worker".to_string()]);

    let worker = &manifest.services["worker"];
    assert_eq!(
        worker.env["SMTP_PORT"],
        EnvValue::Literal("587".into()),
        "numbers keep their text"
    );
    assert_eq!(
        worker.resources.cpu, None,
        "an unnamed dimension stays unnamed"
    );
    assert_eq!(worker.replicas, 1);
    assert_eq!(
        worker.env["PAYMENTS_API_KEY"],
        EnvValue::FromEnv("SHOP_PAYMENTS_TEST_KEY".into())
    );

    let report = &manifest.services["report"];
    assert_eq!(report.cron.as_ref().unwrap().as_str(), "* * * * *");
    assert_eq!(report.port, None);

    assert_eq!(
        manifest.egress.allow[1],
        HostRule::Wildcard("pythonhosted.org".into())
    );
    assert_eq!(manifest.egress.capture[0].response.status, 200);
    assert_eq!(
        manifest.egress.capture[1].response,
        CannedResponse::default()
    );
    assert_eq!(manifest.egress.mail, MailPolicy::Capture);
    let database = manifest.database.as_ref().expect("the shop has a database");
    assert_eq!(database.env, "DATABASE_URL");
    assert_eq!(
        database.provider,
        af_manifest::DatabaseProvider::Container {
            image: "af-postgres:latest".into(),
            seed: Some("db/seed.sql".into()),
        }
    );

    let order: Vec<&str> = manifest
        .services_in_start_order()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(order, ["worker", "report", "web"]);
    let waves: Vec<Vec<&str>> = manifest
        .services_in_start_waves()
        .iter()
        .map(|wave| wave.iter().map(|s| s.name.as_str()).collect())
        .collect();
    assert_eq!(waves, [vec!["worker"], vec!["report", "web"]]);
}

#[test]
fn defaults_and_normalization() {
    let manifest = af_manifest::parse(
        "name: app\nruntime: {provider: kubernetes, domain: Preview.Example.COM.}\nservices:\n  api: {build: ./api}\negress:\n  allow: [API.Example.com.]\n  capture: [hooks.example.com]\n",
        "af.yaml",
    )
    .unwrap();
    assert_eq!(manifest.runtime.namespace_prefix, "af-");
    assert_eq!(manifest.runtime.kubeconfig_context, None);
    assert!(!manifest.runtime.netlock, "netlock is opt-in");
    assert_eq!(
        manifest.runtime.domain.as_deref(),
        Some("preview.example.com")
    );
    assert_eq!(
        manifest.services["api"].source,
        ImageSource::Build {
            context: "./api".into(),
            dockerfile: "Dockerfile".into()
        }
    );
    assert_eq!(
        manifest.egress.allow,
        vec![HostRule::Exact("api.example.com".into())]
    );
    assert_eq!(
        manifest.egress.mail,
        MailPolicy::Deny,
        "mail is denied unless captured"
    );
    assert_eq!(manifest.database, None);
}

#[test]
fn external_database_reads_its_url_from_the_environment() {
    let manifest = af_manifest::parse(
        "name: app\nruntime: {provider: local}\nservices: {api: {image: a}}\ndatabase: {provider: external, url_from_env: STAGING_DB}\n",
        "af.yaml",
    )
    .unwrap();
    let database = manifest.database.unwrap();
    assert_eq!(
        database.provider,
        DatabaseProvider::External {
            url_from_env: "STAGING_DB".into(),
            host: None,
        }
    );
}

#[test]
fn an_external_database_may_name_its_host_for_the_sidecar() {
    let manifest = af_manifest::parse(
        "name: app\nruntime: {provider: local}\nservices: {api: {image: a}}\ndatabase: {provider: external, url_from_env: STAGING_DB, host: DB.Staging.Example.com.}\n",
        "af.yaml",
    )
    .unwrap();
    assert_eq!(
        manifest.database.unwrap().provider,
        DatabaseProvider::External {
            url_from_env: "STAGING_DB".into(),
            host: Some("db.staging.example.com".into()),
        }
    );
    for bad in ["\"*.example.com\"", "10.0.0.0/8", "\"not a host\""] {
        let errors = af_manifest::parse(
            &format!("name: app\nruntime: {{provider: local}}\nservices: {{api: {{image: a}}}}\ndatabase: {{provider: external, url_from_env: STAGING_DB, host: {bad}}}\n"),
            "af.yaml",
        )
        .unwrap_err();
        assert!(
            errors
                .to_string()
                .contains("is not one host name or IP address"),
            "{bad}: {errors}"
        );
    }
}

#[test]
fn a_container_database_defaults_its_variable() {
    let manifest = af_manifest::parse(
        "name: app\nruntime: {provider: local}\nservices: {api: {image: a}}\ndatabase: {provider: container, engine: postgres}\n",
        "af.yaml",
    )
    .unwrap();
    let database = manifest.database.unwrap();
    assert!(matches!(
        database.provider,
        DatabaseProvider::Container { .. }
    ));
    assert_eq!(database.env, "DATABASE_URL");
}

#[test]
fn normalized_manifest_serializes_for_machines() {
    let manifest = af_manifest::load(example_path()).unwrap();
    let json = serde_json::to_value(&manifest).unwrap();
    assert_eq!(json["services"]["web"]["resources"]["cpu"], "250m");
    assert_eq!(json["egress"]["allow"][1], "*.pythonhosted.org");
    assert_eq!(json["services"]["report"]["cron"], "* * * * *");
}

#[test]
fn an_unreadable_file_is_reported_with_its_code() {
    let err = af_manifest::load("/nonexistent/af.yaml").unwrap_err();
    assert_eq!(err.problems[0].code, ManifestCode::Unreadable);
    assert_eq!(err.problems[0].location, None);
}

#[test]
fn a_missing_build_context_is_reported_where_it_was_written() {
    let dir = std::env::temp_dir().join(format!("af-manifest-test-{}", std::process::id()));
    fs::create_dir_all(dir.join("present")).unwrap();
    let path = dir.join("af.yaml");
    fs::write(
        &path,
        "name: app\nruntime: {provider: local}\nservices:\n  ok: {build: ./present}\n  broken:\n    build: {context: ./absent}\n",
    )
    .unwrap();
    let err = af_manifest::load(&path).unwrap_err();
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(err.problems.len(), 1, "{:?}", err.problems);
    assert_eq!(err.problems[0].code, ManifestCode::BuildContextMissing);
    let at = err.problems[0].location.unwrap();
    assert_eq!((at.line, at.column), (6, 5));
}

/// A capture CA is wanted exactly where something captured may arrive over TLS: a captured host
/// (HTTPS) or captured mail (STARTTLS).
#[test]
fn a_capture_ca_is_needed_where_hosts_or_mail_are_captured() {
    let nothing = EgressPolicy::default();
    assert!(!nothing.needs_capture_ca(), "deny-only egress needs none");
    let mail = EgressPolicy {
        mail: MailPolicy::Capture,
        ..EgressPolicy::default()
    };
    assert!(mail.needs_capture_ca());
    let hosts = EgressPolicy {
        capture: vec![CaptureRule {
            host: HostRule::Exact("api.payments.example".into()),
            response: CannedResponse::default(),
        }],
        ..EgressPolicy::default()
    };
    assert!(hosts.needs_capture_ca());
}

#[test]
fn runtime_netlock_is_read() {
    let manifest = af_manifest::parse(
        "name: app\nruntime: {provider: kubernetes, netlock: true}\nservices:\n  api: {build: ./api}\n",
        "af.yaml",
    )
    .unwrap();
    assert!(manifest.runtime.netlock);
}
