//! A published URL is ready once the ingress stops answering "no route" (404) or a gateway error:
//! asked through a test ingress on loopback, with the Host header of the preview URL.

use std::time::Duration;

use af_kube::apply::Patience;
use af_kube::apply::published::{settled, wait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn missing_routes_and_gateway_errors_are_not_settled_and_redirects_are() {
    for status in [404, 502, 503, 504] {
        assert!(!settled(status), "{status}");
    }
    for status in [200, 204, 301, 302, 401, 500] {
        assert!(settled(status), "{status}");
    }
}

/// An "ingress" answering `statuses` in turn (the last one for ever), recording the Host headers.
async fn ingress(
    statuses: Vec<u16>,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let hosts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = hosts.clone();
    tokio::spawn(async move {
        let mut index = 0;
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = vec![0u8; 1024];
            let n = stream.read(&mut request).await.unwrap_or(0);
            let text = String::from_utf8_lossy(&request[..n]).to_string();
            if let Some(host) = text.lines().find_map(|l| l.strip_prefix("host: ")) {
                seen.lock().unwrap().push(host.to_string());
            }
            let status = statuses[index.min(statuses.len() - 1)];
            index += 1;
            let _ = stream
                .write_all(format!("HTTP/1.1 {status} x\r\ncontent-length: 0\r\n\r\n").as_bytes())
                .await;
        }
    });
    (address, hosts)
}

fn quick() -> Patience {
    Patience {
        timeout: Duration::from_millis(500),
        interval: Duration::from_millis(10),
    }
}

#[tokio::test]
async fn the_url_is_asked_until_the_route_is_there() {
    let (address, hosts) = ingress(vec![404, 503, 302]).await;
    wait(
        "shop-main-web.preview.example",
        "/healthz",
        Some(address),
        quick(),
    )
    .await
    .unwrap();
    let hosts = hosts.lock().unwrap();
    assert_eq!(hosts.len(), 3, "asked until a 302, which is not followed");
    assert!(hosts.iter().all(|h| h == "shop-main-web.preview.example"));
}

#[tokio::test]
async fn a_route_that_never_comes_is_named_with_what_it_answers() {
    let (address, _) = ingress(vec![404]).await;
    let err = wait(
        "shop-main-web.preview.example",
        "/healthz",
        Some(address),
        quick(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("http://shop-main-web.preview.example/healthz")
            && text.contains("still answers 404"),
        "{text}"
    );
}
