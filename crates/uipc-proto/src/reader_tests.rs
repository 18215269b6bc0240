//! Tests of [`super`]: frames across partial writes, read ahead, bounds and budgets.

use super::*;
use crate::transport::send_frame;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

#[test]
fn frames_arrive_whole_across_partial_writes_and_stop_at_their_boundary() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut r = FrameReader::new();
    assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
    (&a).write_all(&3u32.to_le_bytes()[..2]).unwrap();
    assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
    (&a).write_all(&3u32.to_le_bytes()[2..]).unwrap();
    (&a).write_all(b"ab").unwrap();
    assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
    (&a).write_all(b"c").unwrap();
    send_frame(a.as_raw_fd(), b"next", false, None).unwrap();
    assert_eq!(
        r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap().payload,
        b"abc"
    );
    assert_eq!(
        r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap().payload,
        b"next"
    );
    assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
    drop(a);
    assert!(matches!(
        r.read(b.as_raw_fd(), MAX_FRAME),
        Err(RecvError::Closed)
    ));
}

#[test]
fn a_small_frame_comes_in_one_read_and_frames_read_past_it_are_kept_for_the_next_calls() {
    let budget = Budget::new(1 << 20);
    let (a, b) = UnixStream::pair().unwrap();
    let on: libc::c_int = 1;
    // SAFETY: sets an int option from a live int.
    unsafe {
        libc::setsockopt(
            b.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&on as *const libc::c_int).cast(),
            4,
        )
    };
    let mut r = FrameReader::with_budget(budget.clone());
    // Three frames, the third cut in its payload, all in the socket before the read.
    send_frame(a.as_raw_fd(), b"first", true, None).unwrap();
    send_frame(a.as_raw_fd(), b"2", true, None).unwrap();
    (&a).write_all(&5u32.to_le_bytes()).unwrap();
    (&a).write_all(b"thi").unwrap();
    let f = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(f.payload, b"first");
    assert!(f.cred.is_some(), "credentials sent with the frame");
    assert!(r.has_ahead(), "the next frames came with the first");
    assert_eq!(
        budget.used(),
        5 + 4 + 1 + 7,
        "the frame and the bytes ahead are charged"
    );
    drop(f);
    // The socket has nothing more, yet the second frame is there.
    let f = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(f.payload, b"2");
    assert_eq!(f.cred.map(|c| c.pid), Some(std::process::id() as i32));
    drop(f);
    assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
    assert!(!r.has_ahead() && r.in_frame());
    (&a).write_all(b"rd").unwrap();
    (&a).write_all(&1u32.to_le_bytes()).unwrap();
    let f = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(f.payload, b"third", "within a frame, reads stop at its end");
    assert!(!r.has_ahead());
    drop(f);
    assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
    // A frame read ahead is checked against the limit of its own turn.
    send_frame(a.as_raw_fd(), b"ok", false, None).unwrap();
    send_frame(a.as_raw_fd(), &[0; 100], false, None).unwrap();
    r = FrameReader::with_budget(budget.clone());
    assert_eq!(r.read(b.as_raw_fd(), 1000).unwrap().unwrap().payload, b"ok");
    assert!(matches!(
        r.read(b.as_raw_fd(), 64),
        Err(RecvError::Bad(DecodeError::Oversized(100)))
    ));
    drop(r);
    assert_eq!(budget.used(), 0, "every charge given back");
}

#[test]
fn a_first_read_takes_no_more_than_the_limit_allows() {
    let (a, b) = UnixStream::pair().unwrap();
    send_frame(a.as_raw_fd(), b"hello", false, None).unwrap();
    send_frame(a.as_raw_fd(), &[1; 200], false, None).unwrap();
    let mut r = FrameReader::new();
    assert_eq!(r.read(b.as_raw_fd(), 8).unwrap().unwrap().payload, b"hello");
    assert_eq!(
        r.ahead.len(),
        3,
        "4 + 8 bytes read: the frame's 9, then 3 of the next"
    );
}

#[test]
fn an_oversized_length_and_a_cut_frame_are_bad() {
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(matches!(
        FrameReader::new().read(b.as_raw_fd(), MAX_FRAME),
        Err(RecvError::Bad(DecodeError::Oversized(_)))
    ));
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&5u32.to_le_bytes()).unwrap();
    (&a).write_all(b"ab").unwrap();
    drop(a);
    assert!(matches!(
        FrameReader::new().read(b.as_raw_fd(), MAX_FRAME),
        Err(RecvError::Bad(DecodeError::Truncated))
    ));
}

#[test]
fn memory_follows_the_bytes_sent_and_the_budget_bounds_it() {
    let budget = Budget::new(64 << 10);
    let (a, b) = UnixStream::pair().unwrap();
    let mut r = FrameReader::with_budget(budget.clone());
    // A 16 MiB frame announced, 10 bytes sent: a page is charged, not 16 MiB.
    (&a).write_all(&MAX_FRAME.to_le_bytes()).unwrap();
    (&a).write_all(&[7; 10]).unwrap();
    assert!(r.read(b.as_raw_fd(), MAX_FRAME).unwrap().is_none());
    assert_eq!(budget.used(), FIRST_CHUNK as u64);
    assert!(r.in_frame());
    // More bytes than the budget allows: refused.
    let chunk = vec![1u8; 100 << 10];
    std::thread::spawn(move || {
        let _ = (&a).write_all(&chunk);
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut res = Ok(None);
    for _ in 0..100 {
        res = r.read(b.as_raw_fd(), MAX_FRAME);
        if res.is_err() {
            break;
        }
    }
    assert!(matches!(res, Err(RecvError::Io(e)) if e.raw_os_error() == Some(libc::ENOMEM)));
    assert!(budget.used() <= 64 << 10);
    drop(r);
    assert_eq!(budget.used(), 0, "a dropped reader gives its bytes back");
    // A whole frame keeps its charge until dropped; a limit below the length is refused.
    let (a, b) = UnixStream::pair().unwrap();
    let mut r = FrameReader::with_budget(budget.clone());
    send_frame(a.as_raw_fd(), &[5; 5000], false, None).unwrap();
    let f = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(f.payload, vec![5; 5000]);
    assert_eq!(budget.used(), 5000);
    drop(f);
    assert_eq!(budget.used(), 0);
    send_frame(a.as_raw_fd(), &[5; 65], false, None).unwrap();
    assert!(matches!(
        r.read(b.as_raw_fd(), 64),
        Err(RecvError::Bad(DecodeError::Oversized(65)))
    ));
}

#[test]
fn a_capped_read_takes_no_more_than_its_cap_of_a_long_frame() {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let payload: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let mut sent = (payload.len() as u32).to_le_bytes().to_vec();
    sent.extend_from_slice(&payload);
    let mut off = 0;
    let mut r = FrameReader::new();
    let cap = 8192;
    let mut reads = 0;
    let frame = loop {
        // Keep the socket full, so only the cap stops each read.
        if let Ok(n) = (&a).write(&sent[off..]) {
            off += n;
        }
        let before = r.payload.len();
        let got = r.read_at_most(b.as_raw_fd(), MAX_FRAME, cap).unwrap();
        reads += 1;
        if let Some(f) = got {
            break f;
        }
        assert!(r.in_payload());
        // The first read also takes the length and a page after it.
        let limit = if before == 0 { cap + AHEAD } else { cap };
        assert!(
            r.payload.len() - before <= limit,
            "took {}",
            r.payload.len() - before
        );
    };
    assert!(!r.in_payload());
    assert_eq!(frame.payload, payload);
    assert!(reads >= payload.len() / (cap + AHEAD), "{reads} reads");
}

#[test]
fn a_descriptor_goes_with_the_frame_it_was_sent_with_when_frames_are_read_together() {
    let (a, b) = UnixStream::pair().unwrap();
    let file = std::fs::File::open("/proc/self/exe").unwrap();
    let ino = |fd: &OwnedFd| crate::client::inode_of(fd.as_raw_fd());
    // A frame without a descriptor, then one with (a Hello, and the request sent behind it
    // before its reply), then a third without: one read takes the first two.
    send_frame(a.as_raw_fd(), b"hello", false, None).unwrap();
    send_frame(a.as_raw_fd(), b"request", false, Some(file.as_raw_fd())).unwrap();
    send_frame(a.as_raw_fd(), b"cancel", false, None).unwrap();
    let mut r = FrameReader::new();
    let first = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(
        (first.payload.as_slice(), first.fd.is_none()),
        (&b"hello"[..], true)
    );
    let second = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(second.payload, b"request");
    let fd = second.fd.expect("the request's descriptor");
    assert_eq!(ino(&fd), crate::client::inode_of(file.as_raw_fd()));
    let third = r.read(b.as_raw_fd(), MAX_FRAME).unwrap().unwrap();
    assert_eq!(
        (third.payload.as_slice(), third.fd.is_none()),
        (&b"cancel"[..], true)
    );
}
