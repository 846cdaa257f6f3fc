//! `af-bench ui`: the web UI's tickets view with `--tickets` tickets in the store (default
//! 10,000): the time to its first byte and its size, against the API call it is made from
//! (`GET /v1/tickets?limit=50`) in the same run. Targets: first byte under 100 ms, page under
//! 200 KB.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use afe_store::{NewTicket, Store};
use anyhow::Result;
use serde_json::json;

pub struct Options {
    pub tickets: usize,
    pub rounds: usize,
    pub afe: PathBuf,
}

use crate::api::TOKEN;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Each request's time to its first byte (the headers: the view is rendered whole before they
/// go) and the body's size.
async fn measure(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    rounds: usize,
) -> Result<(Vec<Duration>, usize)> {
    let mut times = Vec::with_capacity(rounds);
    let mut size = 0;
    for _ in 0..rounds {
        let mut request = client.get(url);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let at = Instant::now();
        let answer = request.send().await?;
        times.push(at.elapsed());
        anyhow::ensure!(answer.status() == 200, "{url} answered {}", answer.status());
        size = answer.bytes().await?.len();
    }
    times.sort();
    Ok((times, size))
}

pub async fn run(options: Options) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = afe_testkit::scratch("afe-bench-ui");
    let store = afe_testkit::published_chain_store(&dir, 3, None).await;
    let revision = afe_testkit::chain_revision(3, None).hash;
    let filling = Instant::now();
    for n in 0..options.tickets {
        store
            .create_ticket(&NewTicket {
                flow: "work".into(),
                input: json!({"n": n}),
                revision: revision.clone(),
                budget_micros: None,
            })
            .await?;
    }
    println!(
        "{} tickets in SQLite in {:.1} s",
        options.tickets,
        filling.elapsed().as_secs_f64()
    );
    store.close().await;
    let config = dir.join("config");
    std::fs::create_dir_all(&config)?;
    afe_testkit::chain_config(&config, 3, None);
    let config_arg = config.display().to_string();
    let store_arg = format!("sqlite://{}", dir.join("afe.db").display());
    let serve = crate::api::serve(
        &options.afe,
        &["--ui", "-c", &config_arg, "--store", &store_arg],
    )?;
    let url = serve.url.clone();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let cookie: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
    let session = vec![("cookie", format!("afe_session={cookie}"))];
    let bearer = vec![("authorization", format!("Bearer {TOKEN}"))];
    // Warm both.
    measure(&client, &format!("{url}/ui"), &session, 3).await?;
    measure(&client, &format!("{url}/v1/tickets?limit=50"), &bearer, 3).await?;
    let (api, api_size) = measure(
        &client,
        &format!("{url}/v1/tickets?limit=50"),
        &bearer,
        options.rounds,
    )
    .await?;
    let (view, view_size) =
        measure(&client, &format!("{url}/ui"), &session, options.rounds).await?;
    let p = |times: &[Duration], q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "GET /v1/tickets?limit=50   first byte p50 {:.1} ms, p90 {:.1} ms; {} bytes",
        ms(p(&api, 0.5)),
        ms(p(&api, 0.9)),
        api_size
    );
    println!(
        "GET /ui (tickets view)     first byte p50 {:.1} ms, p90 {:.1} ms; {} bytes ({:.1} KB)",
        ms(p(&view, 0.5)),
        ms(p(&view, 0.9)),
        view_size,
        view_size as f64 / 1000.0
    );
    println!(
        "view / API call: {:.2}x; targets: first byte < 100 ms, page < 200 KB",
        ms(p(&view, 0.5)) / ms(p(&api, 0.5))
    );
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
