//! What the sidecar records and delivers, as the runtimes hand it to the CLI: decisions, the
//! capture inbox, and webhook deliveries. The fields are fixed so that `--json` output is a stable
//! interface.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How the sidecar decided a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Forwarded to the real destination.
    Allow,
    /// Answered by the sidecar and recorded in the inbox.
    Capture,
    /// Refused.
    Deny,
}

impl std::str::FromStr for Verdict {
    type Err = String;

    fn from_str(text: &str) -> Result<Verdict, String> {
        match text {
            "allow" => Ok(Verdict::Allow),
            "capture" => Ok(Verdict::Capture),
            "deny" => Ok(Verdict::Deny),
            other => Err(format!(
                "{other:?} is not a verdict; use allow, capture or deny"
            )),
        }
    }
}

/// One decision: every field always present, so a reader never guesses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// RFC 3339, UTC.
    pub time: String,
    pub environment: String,
    /// The workload's address, as the sidecar saw it.
    pub client: String,
    /// `http`, `http-transparent`, `connect`, `tls-transparent`, `dns`, `smtp`, `webhook`,
    /// `relay` (a relayed TCP connection: an external database's).
    pub protocol: String,
    /// HTTP method, or the DNS query type.
    pub method: String,
    pub host: String,
    pub port: u16,
    /// The address dialled (allowed requests only); empty otherwise.
    pub resolved: String,
    pub verdict: Verdict,
    /// The rule that decided, as written in the manifest, or why nothing matched.
    pub rule: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

impl DecisionRecord {
    /// The verdict as the log spells it.
    pub fn verdict_text(&self) -> &'static str {
        match self.verdict {
            Verdict::Allow => "allow",
            Verdict::Capture => "capture",
            Verdict::Deny => "deny",
        }
    }
}

/// Which decisions to read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionQuery {
    pub verdict: Option<Verdict>,
    /// Exact host name.
    pub host: Option<String>,
    /// Only decisions at or after this RFC 3339 time.
    pub since: Option<String>,
}

/// Something the sidecar captured instead of letting it out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxEntry {
    pub id: String,
    pub time: String,
    #[serde(flatten)]
    pub item: CapturedItem,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CapturedItem {
    Http {
        method: String,
        host: String,
        path: String,
        headers: BTreeMap<String, String>,
        body: String,
        /// True when the body was longer than the capture limit and was cut.
        truncated: bool,
    },
    Mail {
        from: String,
        to: Vec<String>,
        subject: String,
        body: String,
        /// True when the body was longer than the capture limit and was cut.
        #[serde(default)]
        truncated: bool,
    },
}

/// A request the sidecar delivers to a service, as a third party would.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookRequest {
    pub service: String,
    pub path: String,
    pub method: String,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

/// The service's answer to a delivered webhook.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    pub status: u16,
    pub body: String,
}
