//! A hostile HTTP "MCP server" on loopback: what it sends is bounded before it is buffered.

use std::time::{Duration, Instant};

use agent_mcp::client::{Limits, McpClient, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const LIMIT: usize = 1024 * 1024;

/// Answers every request with `head` and then `body_bytes` bytes of `fill`, never ending a
/// line, and counts the bytes it managed to write.
async fn serve(head: &'static str, body_bytes: usize) -> (String, tokio::task::JoinHandle<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 64 * 1024];
        let _ = socket.read(&mut request).await;
        let _ = socket.write_all(head.as_bytes()).await;
        let chunk = vec![b'x'; 64 * 1024];
        let mut written = 0;
        while written < body_bytes {
            if socket.write_all(&chunk).await.is_err() {
                break;
            }
            written += chunk.len();
        }
        written
    });
    (url, task)
}

fn limits() -> Limits {
    Limits {
        max_response_bytes: LIMIT,
        max_sse_event_bytes: LIMIT,
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_json_body_past_the_limit_is_refused_before_it_is_read() {
    // Declared too large: refused from the header, nothing read.
    let (url, _task) = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 104857600\r\n\r\n",
        4 * LIMIT,
    )
    .await;
    let error = McpClient::connect(ServerConfig::http("hostile", url).limits(limits()))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("exceeded the maximum size of 1048576 bytes"),
        "{error}"
    );
}

#[tokio::test]
async fn an_endless_json_body_stops_at_the_limit() {
    let started = Instant::now();
    let (url, task) = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
        64 * LIMIT,
    )
    .await;
    let error = McpClient::connect(ServerConfig::http("hostile", url).limits(limits()))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("exceeded the maximum size of 1048576 bytes"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(task);
}

#[tokio::test]
async fn an_endless_sse_event_stops_at_the_limit() {
    let (url, task) = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: ",
        64 * LIMIT,
    )
    .await;
    let error = tokio::time::timeout(
        Duration::from_secs(20),
        McpClient::connect(ServerConfig::http("hostile", url).limits(limits())),
    )
    .await
    .expect("the client gives up on its own")
    .unwrap_err();
    assert!(
        error.to_string().contains("MCP server `hostile`"),
        "{error}"
    );
    // The client stopped reading long before the server's 64 MiB were through.
    let written = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    assert!(written < 32 * LIMIT, "{written} bytes were taken");
}

#[tokio::test]
async fn a_server_that_never_answers_the_handshake_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    // Accepts and reads, never answers.
    let _task = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut request).await;
            open.push(socket);
        }
    });
    let started = Instant::now();
    let error = McpClient::connect(
        ServerConfig::http("silent", url).connect_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot connect to MCP server `silent`: the server did not finish the MCP handshake within 0.5 s"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn errors_do_not_repeat_the_url_and_its_query() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp?api_key=SECRET-123");
    let error = McpClient::connect(ServerConfig::http("down", url))
        .await
        .unwrap_err();
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("MCP server `down`"), "{shown}");
    assert!(!shown.contains("SECRET-123"), "{shown}");
}
