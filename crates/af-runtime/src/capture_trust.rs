//! How services are told to trust their environment's capture CA (HTTPS capture), the same on every
//! runtime: two files in one read-only directory, and the variables the usual TLS stacks read.
//!
//! The bundle is the trust store of the machine af runs on followed by the capture CA, so a
//! service that reads it still trusts the public CAs for the hosts it is allowed to reach. A
//! variable the manifest sets for a service is left as the manifest says.

/// An environment's capture CA as text: the certificate (for the services) and the key (for the
/// sidecar only). Made by [`af_sidecar_api::new_ca`].
pub use af_sidecar_api::CaptureCaPem;

/// Where the files are mounted in every application and migration container.
pub const TRUST_DIR: &str = "/etc/af";
/// The capture CA's certificate alone.
pub const CA_FILE_NAME: &str = "capture-ca.pem";
/// The machine's trust store and the capture CA.
pub const BUNDLE_FILE_NAME: &str = "ca-bundle.pem";

/// Where af looks for the machine's trust store, first found wins (Debian and Ubuntu, Fedora and
/// RHEL, Alpine and others).
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The machine's trust store, when it has one at a usual place.
pub fn system_bundle() -> Option<String> {
    SYSTEM_BUNDLES
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .filter(|text| text.contains("-----BEGIN CERTIFICATE-----"))
}

/// The bundle services get: the machine's store, when there is one, then the capture CA.
pub fn bundle(system: Option<&str>, ca_cert: &str) -> String {
    match system {
        Some(system) => format!("{}\n{}", system.trim_end(), ca_cert),
        None => ca_cert.to_string(),
    }
}

/// The variables that point a service's TLS stacks at the files, (name, value), leaving out those
/// `manifest_sets`. Without the machine's store (`with_system_store` false) the bundle would hold
/// the capture CA alone, which would make a service distrust every public host it is allowed to
/// reach; then only the additive variables are set.
pub fn variables(
    with_system_store: bool,
    manifest_sets: impl Fn(&str) -> bool,
) -> Vec<(&'static str, String)> {
    let ca = format!("{TRUST_DIR}/{CA_FILE_NAME}");
    let bundle = format!("{TRUST_DIR}/{BUNDLE_FILE_NAME}");
    // OpenSSL (and Python's ssl, Ruby), Go and rustls-native-certs read SSL_CERT_FILE; Python's
    // requests reads REQUESTS_CA_BUNDLE; curl CURL_CA_BUNDLE. Node.js adds NODE_EXTRA_CA_CERTS to
    // its own roots. AF_CAPTURE_CA is for anything else (a JVM's keystore, say).
    let replacing = [
        ("SSL_CERT_FILE", &bundle),
        ("REQUESTS_CA_BUNDLE", &bundle),
        ("CURL_CA_BUNDLE", &bundle),
    ];
    let adding = [("NODE_EXTRA_CA_CERTS", &ca), ("AF_CAPTURE_CA", &ca)];
    replacing
        .iter()
        .filter(|_| with_system_store)
        .chain(adding.iter())
        .filter(|(name, _)| !manifest_sets(name))
        .map(|(name, value)| (*name, value.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_keeps_its_own_settings() {
        let all = variables(true, |_| false);
        assert_eq!(
            all,
            [
                ("SSL_CERT_FILE", "/etc/af/ca-bundle.pem".to_string()),
                ("REQUESTS_CA_BUNDLE", "/etc/af/ca-bundle.pem".to_string()),
                ("CURL_CA_BUNDLE", "/etc/af/ca-bundle.pem".to_string()),
                ("NODE_EXTRA_CA_CERTS", "/etc/af/capture-ca.pem".to_string()),
                ("AF_CAPTURE_CA", "/etc/af/capture-ca.pem".to_string()),
            ]
        );
        let kept = variables(true, |name| name == "SSL_CERT_FILE");
        assert!(!kept.iter().any(|(name, _)| *name == "SSL_CERT_FILE"));
        assert_eq!(kept.len(), 4);
    }

    #[test]
    fn without_the_machines_store_only_additive_variables_are_set() {
        assert_eq!(
            variables(false, |_| false),
            [
                ("NODE_EXTRA_CA_CERTS", "/etc/af/capture-ca.pem".to_string()),
                ("AF_CAPTURE_CA", "/etc/af/capture-ca.pem".to_string()),
            ]
        );
    }

    #[test]
    fn the_bundle_ends_with_the_capture_ca() {
        assert_eq!(bundle(Some("SYSTEM\n\n"), "CA\n"), "SYSTEM\nCA\n");
        assert_eq!(bundle(None, "CA\n"), "CA\n");
    }
}
