//! An environment's capture CA: made once per environment by the runtime that creates it, kept for
//! the environment's life (its services trust it), the key given to the sidecar only and the
//! certificate to the services. The sidecar signs a certificate for each captured name with it.
//!
//! The CA is a self-signed X.509 v3 certificate over an ECDSA P-256 key, written here in DER
//! directly (RFC 5280 section 4.1) and signed with ring, so making one needs no certificate
//! library in the CLI: the sidecar, which parses and signs with it, carries that.

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

/// An environment's capture CA as text: the certificate (for the services) and the key (for the
/// sidecar only), both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CaptureCaPem {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for CaptureCaPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CaptureCaPem")
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

/// A new capture CA for `environment`: a fresh P-256 key, and a certificate naming the
/// environment that may sign end-entity certificates only (path length 0).
pub fn new_ca(environment: &str) -> Result<CaptureCaPem, String> {
    let random = SystemRandom::new();
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &random).map_err(|_| {
            "making the capture CA's key: the system's random source failed".to_string()
        })?;
    let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &random)
        .map_err(|e| format!("reading back the capture CA's new key: {e}"))?;
    let mut serial = [0u8; 16];
    random
        .fill(&mut serial)
        .map_err(|_| "making the capture CA's serial: the system's random source failed")?;
    let tbs = tbs_certificate(environment, &serial, key.public_key().as_ref());
    let signature = key
        .sign(&random, &tbs)
        .map_err(|_| "signing the capture CA: the system's random source failed".to_string())?;
    let certificate = sequence(&[&tbs, &ECDSA_WITH_SHA256, &bit_string(signature.as_ref(), 0)]);
    Ok(CaptureCaPem {
        cert: pem("CERTIFICATE", &certificate),
        key: pem("PRIVATE KEY", pkcs8.as_ref()),
    })
}

/// AlgorithmIdentifier ecdsa-with-SHA256 (1.2.840.10045.4.3.2), no parameters (RFC 5758).
const ECDSA_WITH_SHA256: [u8; 12] = [
    0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02,
];
/// AlgorithmIdentifier id-ecPublicKey (1.2.840.10045.2.1) on prime256v1 (1.2.840.10045.3.1.7).
const EC_P256_PUBLIC_KEY: [u8; 21] = [
    0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
    0xce, 0x3d, 0x03, 0x01, 0x07,
];
const OID_ORGANIZATION: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x0a];
const OID_COMMON_NAME: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
const OID_SUBJECT_KEY_IDENTIFIER: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x0e];
const OID_KEY_USAGE: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x0f];
const OID_BASIC_CONSTRAINTS: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x13];

/// The certificate's signed part: v3, the serial, issuer = subject, valid from 1975 to 4096 (the
/// environment's life decides when it ends, not a date), the key, and the CA's extensions.
fn tbs_certificate(environment: &str, serial: &[u8], public_key: &[u8]) -> Vec<u8> {
    let name = sequence(&[
        &set(&sequence(&[&OID_ORGANIZATION, &utf8_string("Antifailure")])),
        &set(&sequence(&[
            &OID_COMMON_NAME,
            &utf8_string(&format!("af egress capture CA for {environment}")),
        ])),
    ]);
    let validity = sequence(&[
        &tlv(TAG_UTC_TIME, b"750101000000Z"),
        &tlv(TAG_GENERALIZED_TIME, b"40960101000000Z"),
    ]);
    let public_key_info = sequence(&[&EC_P256_PUBLIC_KEY, &bit_string(public_key, 0)]);
    // The key identifier as RFC 7093 method 1: SHA-256 of the key, cut to 160 bits. The sidecar
    // names it in the certificates it signs, so clients that look up issuers by it find this CA.
    let digest = ring::digest::digest(&ring::digest::SHA256, public_key);
    let key_id = &digest.as_ref()[..20];
    // digitalSignature (bit 0), keyCertSign (5), cRLSign (6): 1000 0110, one unused bit.
    let key_usage = bit_string(&[0x86], 1);
    let extensions = sequence(&[
        &extension(
            &OID_BASIC_CONSTRAINTS,
            true,
            &sequence(&[&BOOLEAN_TRUE, &integer(&[0])]),
        ),
        &extension(&OID_KEY_USAGE, true, &key_usage),
        &extension(
            &OID_SUBJECT_KEY_IDENTIFIER,
            false,
            &tlv(TAG_OCTET_STRING, key_id),
        ),
    ]);
    sequence(&[
        &tlv(TAG_EXPLICIT_0, &integer(&[2])),
        &integer(serial),
        &ECDSA_WITH_SHA256,
        &name,
        &validity,
        &name,
        &public_key_info,
        &tlv(TAG_EXPLICIT_3, &extensions),
    ])
}

const TAG_INTEGER: u8 = 0x02;
const TAG_BIT_STRING: u8 = 0x03;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_UTF8_STRING: u8 = 0x0c;
const TAG_UTC_TIME: u8 = 0x17;
const TAG_GENERALIZED_TIME: u8 = 0x18;
const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_EXPLICIT_0: u8 = 0xa0;
const TAG_EXPLICIT_3: u8 = 0xa3;
const BOOLEAN_TRUE: [u8; 3] = [0x01, 0x01, 0xff];

/// One DER element: tag, definite length (short or long form), content.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let length = content.len();
    if length < 0x80 {
        out.push(length as u8);
    } else {
        let bytes: Vec<u8> = length
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    tlv(TAG_SEQUENCE, &parts.concat())
}

fn set(part: &[u8]) -> Vec<u8> {
    tlv(TAG_SET, part)
}

fn utf8_string(text: &str) -> Vec<u8> {
    tlv(TAG_UTF8_STRING, text.as_bytes())
}

fn bit_string(bits: &[u8], unused: u8) -> Vec<u8> {
    tlv(TAG_BIT_STRING, &[&[unused], bits].concat())
}

/// A non-negative INTEGER from big-endian bytes: leading zeros dropped, one put back when the
/// first bit would make it negative.
fn integer(be: &[u8]) -> Vec<u8> {
    let trimmed: Vec<u8> = be.iter().copied().skip_while(|b| *b == 0).collect();
    let content = match trimmed.first() {
        None => vec![0],
        Some(first) if first & 0x80 != 0 => [&[0], trimmed.as_slice()].concat(),
        Some(_) => trimmed,
    };
    tlv(TAG_INTEGER, &content)
}

fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let value = tlv(TAG_OCTET_STRING, value);
    if critical {
        sequence(&[oid, &BOOLEAN_TRUE, &value])
    } else {
        sequence(&[oid, &value])
    }
}

/// PEM (RFC 7468): the base64 of `der` in lines of 64 between the label's lines.
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_lengths_take_the_short_form_below_128_and_the_long_form_above() {
        assert_eq!(tlv(0x04, &[7; 3])[..2], [0x04, 3]);
        assert_eq!(tlv(0x04, &[7; 127])[..2], [0x04, 127]);
        assert_eq!(tlv(0x04, &[7; 128])[..3], [0x04, 0x81, 128]);
        assert_eq!(tlv(0x04, &[7; 300])[..4], [0x04, 0x82, 0x01, 0x2c]);
    }

    #[test]
    fn integers_are_minimal_and_never_negative() {
        assert_eq!(integer(&[0, 0, 5]), [0x02, 1, 5]);
        assert_eq!(integer(&[0x80, 1]), [0x02, 3, 0, 0x80, 1]);
        assert_eq!(integer(&[0, 0]), [0x02, 1, 0]);
    }

    #[test]
    fn each_ca_is_new_and_names_its_environment() {
        let one = new_ca("shop-main").unwrap();
        let two = new_ca("shop-main").unwrap();
        assert_ne!(one.key, two.key);
        assert_ne!(one.cert, two.cert);
        assert!(one.cert.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert!(one.key.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(
            !format!("{one:?}").contains("PRIVATE KEY"),
            "Debug never shows the key"
        );
        use base64::Engine;
        let body: String = one
            .cert
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        let needle = b"af egress capture CA for shop-main";
        assert!(der.windows(needle.len()).any(|w| w == needle));
    }
}
