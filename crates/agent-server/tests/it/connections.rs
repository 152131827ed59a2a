//! Slow and greedy clients over real TCP: a stalled request head is cut off while others are
//! served, an idle keep-alive connection is closed, connections over the cap get 503.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{CONFIG, TestServer};

fn config(extra: &str) -> String {
    CONFIG.replacen("[server]\n", &format!("[server]\n{extra}\n"), 1)
}

fn address(server: &TestServer) -> String {
    server.url.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection (EOF or reset); what it sent, and when.
async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> (String, Instant) {
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .expect("the server did not close the connection");
    (
        String::from_utf8_lossy(&received).into_owned(),
        Instant::now(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalled_in_its_request_head_is_cut_off_while_others_are_served() {
    let server = TestServer::with(
        &config("header_read_timeout_secs = 1\nidle_timeout_secs = 30"),
        Vec::new(),
    )
    .await;
    let address = address(&server);
    // The client: half a request head, then nothing.
    let mut stalled = TcpStream::connect(&address).await.unwrap();
    let started = Instant::now();
    stalled
        .write_all(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        .await
        .unwrap();
    // A slowloris: a byte every 200 ms, never idle long, never finishing the head.
    let mut trickling = TcpStream::connect(&address).await.unwrap();
    let trickle = tokio::spawn(async move {
        let trickle_started = Instant::now();
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        {
            if trickling.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (text, closed) = read_to_close(&mut trickling, Duration::from_secs(10)).await;
        (text, closed - trickle_started)
    });
    // Meanwhile everyone else is served, many times over.
    let mut served = 0;
    while started.elapsed() < Duration::from_millis(800) {
        let response = server
            .client
            .get(format!("{}/healthz", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        served += 1;
    }
    assert!(served >= 5, "only {served} requests served meanwhile");
    let (text, closed) = read_to_close(&mut stalled, Duration::from_secs(10)).await;
    let after = closed - started;
    assert!(text.is_empty(), "the stalled client got {text:?}");
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_millis(2500),
        "the stalled client was cut after {after:?}, not about 1 s"
    );
    let (text, after) = trickle.await.unwrap();
    assert!(text.is_empty(), "the trickling client got {text:?}");
    assert!(
        after < Duration::from_millis(2500),
        "the trickling client was cut after {after:?}, not about 1 s"
    );
    eprintln!(
        "stalled head cut after {:?}, trickle after {after:?}, {served} served meanwhile",
        closed - started
    );
    // And the server still answers.
    let response = server
        .client
        .get(format!("{}/healthz", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let server = TestServer::with(
        &config("header_read_timeout_secs = 30\nidle_timeout_secs = 1"),
        Vec::new(),
    )
    .await;
    let mut stream = TcpStream::connect(address(&server)).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0_u8; 4096];
    let n = stream.read(&mut buffer).await.unwrap();
    let answered = Instant::now();
    let head = String::from_utf8_lossy(&buffer[..n]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Kept alive: a second request on the same connection is served.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = stream.read(&mut buffer).await.unwrap();
    let answered_again = Instant::now();
    assert!(String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 200"));
    assert!(answered_again - answered < Duration::from_secs(1));
    // Then silence: closed about a second after the last response.
    let (text, closed) = read_to_close(&mut stream, Duration::from_secs(10)).await;
    let idle = closed - answered_again;
    assert!(text.is_empty(), "{text:?}");
    eprintln!("idle keep-alive connection closed after {idle:?}");
    assert!(
        idle >= Duration::from_millis(900) && idle < Duration::from_millis(2500),
        "closed after {idle:?} idle, not about 1 s"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_get_503_and_are_counted() {
    let server = TestServer::with(&config("max_connections = 3"), Vec::new()).await;
    let address = address(&server);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(&address).await.unwrap());
    }
    // The server must have accepted the three before the fourth arrives.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server
        .state
        .metrics()
        .value("agentry_open_connections", &[])
        < 3.0
    {
        assert!(
            Instant::now() < deadline,
            "the three connections were not accepted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut refused = Vec::new();
    for _ in 0..2 {
        let mut extra = TcpStream::connect(&address).await.unwrap();
        extra
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (text, _) = read_to_close(&mut extra, Duration::from_secs(5)).await;
        refused.push(text);
    }
    for text in &refused {
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503"), "{text}");
        assert!(
            head.to_ascii_lowercase().contains("connection: close"),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["status"], 503);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("too many open connections"),
            "{body}"
        );
    }
    assert_eq!(
        server
            .state
            .metrics()
            .value("agentry_connections_refused_total", &[("limit", "server")]),
        2.0
    );
    // A held connection is a real one: it is served.
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (text, _) = read_to_close(&mut held[0], Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // Closing one makes room: the next client is served, and /metrics shows both series.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server
        .state
        .metrics()
        .value("agentry_open_connections", &[])
        > 0.0
    {
        assert!(
            Instant::now() < deadline,
            "the closed connections were not counted down"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let metrics = server
        .client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentry_connections_refused_total{limit=\"server\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("agentry_open_connections 1"), "{metrics}");
    server.shutdown().await;
}

/// A connection from `source` (any 127/8 address reaches the server).
async fn connect_from(source: [u8; 4], address: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from((source, 0)))
        .unwrap();
    socket.connect(address.parse().unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_place_and_others_are_served() {
    let server = TestServer::with(
        &config("max_connections = 100\nmax_connections_per_address = 2"),
        Vec::new(),
    )
    .await;
    let address = address(&server);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(connect_from([127, 0, 0, 7], &address).await);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while server
        .state
        .metrics()
        .value("agentry_open_connections", &[])
        < 2.0
    {
        assert!(
            Instant::now() < deadline,
            "the two connections were not accepted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut third = connect_from([127, 0, 0, 7], &address).await;
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (text, _) = read_to_close(&mut third, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert_eq!(
        server
            .state
            .metrics()
            .value("agentry_connections_refused_total", &[("limit", "address")]),
        1.0
    );
    // Another address is served meanwhile.
    let mut other = connect_from([127, 0, 0, 8], &address).await;
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (text, _) = read_to_close(&mut other, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // Closing one of the first address's connections gives it its place back.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    while server
        .state
        .metrics()
        .value("agentry_open_connections", &[])
        > 1.0
    {
        assert!(
            Instant::now() < deadline,
            "the closed connection was not counted down"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut again = connect_from([127, 0, 0, 7], &address).await;
    again
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (text, _) = read_to_close(&mut again, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalled_in_its_request_body_gets_408_within_the_body_timeout() {
    let server = TestServer::with(&config("body_read_timeout_secs = 1"), Vec::new()).await;
    for path in ["/v1/sessions", "/v1/chat/completions"] {
        let mut stream = TcpStream::connect(address(&server)).await.unwrap();
        let started = Instant::now();
        stream
            .write_all(
                format!(
                    "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-acme-test-0001\r\n\
                     Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"model\": "
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let (text, closed) = read_to_close(&mut stream, Duration::from_secs(10)).await;
        let after = closed - started;
        assert!(text.starts_with("HTTP/1.1 408"), "{path}: {text}");
        assert!(text.contains("did not arrive within 1 s"), "{path}: {text}");
        assert!(
            after >= Duration::from_millis(900) && after < Duration::from_millis(2500),
            "{path}: answered after {after:?}, not about 1 s"
        );
    }
    server.shutdown().await;
}

#[test]
fn zero_timeouts_and_caps_are_refused() {
    for key in [
        "header_read_timeout_secs = 0",
        "idle_timeout_secs = 0",
        "max_connections = 0",
        "max_connections_per_address = 0",
    ] {
        let error = agent_server::ServerConfig::from_toml(&config(key))
            .unwrap_err()
            .to_string();
        assert!(error.contains("must be at least 1"), "{key}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_response_in_flight_is_never_cut_by_the_timeouts() {
    use std::sync::Arc;

    use agent_backends::{ScriptedBackend, ScriptedTurn};
    // The model pauses 2.5 s in the middle of its answer, and before answering at all:
    // longer than both timeouts (1 s), with nothing on the wire.
    let turn = || {
        ScriptedTurn::text("first")
            .with_delay(Duration::from_millis(2500))
            .with_text(" second")
    };
    let backend = ScriptedBackend::cycle([turn()]);
    let dir = tempfile::tempdir().unwrap();
    let mut server_config = agent_server::ServerConfig::from_toml(&config(
        "header_read_timeout_secs = 1\nidle_timeout_secs = 1",
    ))
    .unwrap();
    server_config.store = agent_server::StoreConfig::Sqlite {
        path: dir.path().join("sessions.db"),
    };
    let state = agent_server::ServerBuilder::new(server_config)
        .with_model("slow", "scripted", Arc::new(backend))
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(agent_server::serve(listener, state, std::future::pending()));
    let client = reqwest::Client::new();
    for stream in [true, false] {
        let started = Instant::now();
        let response = client
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth("key-acme-test-0001")
            .json(&serde_json::json!({"model": "slow", "stream": stream,
                   "messages": [{"role": "user", "content": "go"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(2500), "{took:?}");
        assert!(
            text.contains("first") && text.contains(" second"),
            "stream {stream}: {text}"
        );
        if stream {
            assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        }
    }
    drop(dir);
}
