use super::tracked::automatic_status;
use super::*;

#[test]
fn only_hypers_own_error_responses_are_replaced() {
    let auto =
        b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
    assert_eq!(automatic_status(auto), Some(431));
    assert_eq!(
        automatic_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"),
        Some(400)
    );
    // A routed response carries the request id: never replaced.
    let routed = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\nx-request-id: rg-1\r\n\r\n{}";
    assert_eq!(automatic_status(routed), None);
    let routed = b"HTTP/1.1 400 Bad Request\r\nX-Request-Id: rg-1\r\n\r\n";
    assert_eq!(automatic_status(routed), None);
    // Other statuses, a head cut short, a body.
    assert_eq!(automatic_status(b"HTTP/1.1 200 OK\r\n\r\n"), None);
    assert_eq!(automatic_status(b"HTTP/1.1 431 Request"), None);
    assert_eq!(automatic_status(b"{\"detail\": 1}"), None);
}

#[tokio::test]
async fn a_loop_with_more_connections_lets_the_others_accept_first() {
    let loads = LoopLoads::new(2);
    let first = LoopAccept {
        loads: loads.clone(),
        index: 0,
    };
    let second = LoopAccept {
        loads: loads.clone(),
        index: 1,
    };
    // Equal: both may accept.
    first.wait_until_least_loaded().await;
    second.wait_until_least_loaded().await;
    let counted = first.count_connection();
    assert!(!loads.is_least(0) && loads.is_least(1));
    // The busier loop waits until the other takes a connection...
    let waiting = tokio::spawn(async move {
        first.wait_until_least_loaded().await;
        first
    });
    tokio::task::yield_now().await;
    let other = second.count_connection();
    let first = waiting.await.unwrap();
    assert!(loads.is_least(0) && loads.is_least(1));
    // ...or, if none comes, accepts anyway once `LEAST_LOADED_WAIT` has passed (returns).
    drop(other);
    assert!(!loads.is_least(0));
    first.wait_until_least_loaded().await;
    drop(counted);
    assert_eq!(loads.open[0].load(Ordering::Relaxed), 0);
}

fn limits(header: u64, idle: u64) -> Limits {
    Limits {
        max_connections: 1,
        header_read_timeout: Duration::from_millis(header),
        idle_timeout: Duration::from_millis(idle),
        body_read_timeout: Duration::from_secs(10),
        max_body_bytes: 1024,
        max_head_bytes: crate::server::MAX_HEAD_BUFFER_BYTES,
        max_header_fields: crate::server::MAX_HEADER_FIELDS,
        max_header_bytes: crate::server::MAX_HEADER_BYTES,
        max_plain_head: super::super::limits::MAX_PLAIN_HEAD,
        max_plain_body: super::super::limits::MAX_PLAIN_BODY,
    }
}

#[tokio::test]
async fn phases_pick_their_deadlines() {
    let limits = limits(10_000, 60_000);
    // The activity reads the coarse clock (`clock`), so the test does too.
    let accepted = crate::clock::coarse_tokio();
    let activity = Arc::new(Activity::new());
    // A new connection: the head deadline counts from accept, also after the first byte.
    let (first, reason) = activity.deadline(limits).unwrap();
    assert_eq!(reason, Closed::HeaderTimeout);
    assert!(first >= accepted + limits.header_read_timeout);
    activity.received();
    assert_eq!(
        activity.deadline(limits),
        Some((first, Closed::HeaderTimeout))
    );
    // In progress: no deadline.
    let guard = activity.begin_request();
    assert_eq!(activity.deadline(limits), None);
    activity.received();
    assert_eq!(activity.deadline(limits), None);
    // Kept alive: the idle clock, until the next request's first byte.
    let ended = crate::clock::coarse_tokio();
    drop(guard);
    let (idle, reason) = activity.deadline(limits).unwrap();
    assert_eq!(reason, Closed::IdleTimeout);
    assert!(idle >= ended + limits.idle_timeout);
    let first_byte = crate::clock::coarse_tokio();
    activity.received();
    let (head, reason) = activity.deadline(limits).unwrap();
    assert_eq!(reason, Closed::HeaderTimeout);
    assert!(head >= first_byte + limits.header_read_timeout && head < idle);
}

#[tokio::test]
async fn the_watchdog_looks_again_no_later_than_any_deadline() {
    let limits = limits(10_000, 60_000);
    let activity = Arc::new(Activity::new());
    let now = Instant::now();
    // New connection: exactly its header deadline.
    let (head, _) = activity.deadline(limits).unwrap();
    assert_eq!(activity.next_check(limits, now), Ok(head));
    // Busy: the request may end now; the shorter timeout is the earliest expiry.
    let guard = activity.begin_request();
    assert_eq!(
        activity.next_check(limits, now),
        Ok(now + limits.header_read_timeout)
    );
    // Kept alive: a head may start at once, so the header timeout bounds the wait,
    // not the (longer) idle deadline.
    drop(guard);
    let (idle, _) = activity.deadline(limits).unwrap();
    let later = Instant::now();
    assert_eq!(
        activity.next_check(limits, later),
        Ok((later + limits.header_read_timeout).min(idle))
    );
    // Past the idle deadline: expired.
    assert_eq!(activity.next_check(limits, idle), Err(Closed::IdleTimeout));
    // A head in progress: its own deadline, expired once passed.
    activity.received();
    let (head, _) = activity.deadline(limits).unwrap();
    assert_eq!(activity.next_check(limits, later), Ok(head));
    assert_eq!(
        activity.next_check(limits, head),
        Err(Closed::HeaderTimeout)
    );
    // A short idle timeout: a new connection's first request may end at once and
    // leave it idle long before its header deadline.
    let short_idle = self::limits(10_000, 300);
    let fresh = Activity::new();
    let now = Instant::now();
    assert_eq!(
        fresh.next_check(short_idle, now),
        Ok(now + short_idle.idle_timeout)
    );
}

#[tokio::test]
async fn expiry_waits_while_busy() {
    let limits = limits(20, 20);
    let activity = Arc::new(Activity::new());
    let guard = activity.begin_request();
    let watchdog = {
        let activity = activity.clone();
        tokio::spawn(async move { activity.expired(limits).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !watchdog.is_finished(),
        "expired while a request was in progress"
    );
    drop(guard);
    let reason = tokio::time::timeout(Duration::from_secs(10), watchdog)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, Closed::IdleTimeout);
}
