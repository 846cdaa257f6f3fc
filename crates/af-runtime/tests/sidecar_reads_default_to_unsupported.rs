//! A runtime that does not implement the sidecar reads answers them with AF-RUN-044 naming itself.

use af_manifest::EnvironmentId;
use af_runtime::{
    Capabilities, DecisionQuery, Environment, EnvironmentStatus, LogStream, ProgressSink, RunCode,
    Runtime, RuntimeError, UpReport, WebhookRequest,
};
use async_trait::async_trait;

struct NoSidecarRuntime(Capabilities);

#[async_trait]
impl Runtime for NoSidecarRuntime {
    fn capabilities(&self) -> &Capabilities {
        &self.0
    }
    async fn up(&self, _: &Environment, _: &dyn ProgressSink) -> Result<UpReport, RuntimeError> {
        unreachable!("not called")
    }
    async fn down(&self, _: &EnvironmentId, _: &dyn ProgressSink) -> Result<(), RuntimeError> {
        unreachable!("not called")
    }
    async fn status(&self, _: &EnvironmentId) -> Result<EnvironmentStatus, RuntimeError> {
        unreachable!("not called")
    }
    async fn logs(&self, _: &EnvironmentId, _: &str, _: bool) -> Result<LogStream, RuntimeError> {
        unreachable!("not called")
    }
}

/// Polls a future that never waits (the default methods return at once) without an executor.
fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => panic!("the default sidecar reads must not wait"),
    }
}

#[test]
fn every_sidecar_read_is_af_run_044_naming_the_runtime() {
    let runtime = NoSidecarRuntime(Capabilities::new("kubernetes", []));
    let id = EnvironmentId::derive("shop", "main");
    let request = WebhookRequest {
        service: "web".into(),
        path: "/hook".into(),
        method: "POST".into(),
        headers: Default::default(),
        body: String::new(),
    };
    let errors = [
        ready(runtime.net_log(&id, &DecisionQuery::default())).unwrap_err(),
        ready(runtime.inbox(&id)).unwrap_err(),
        ready(runtime.trigger_webhook(&id, &request)).unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.code(), RunCode::Unsupported);
        assert!(
            err.to_string()
                .contains("the kubernetes runtime does not support"),
            "{err}"
        );
    }
}
