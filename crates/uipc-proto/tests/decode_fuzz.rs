//! Decoding hostile bytes: random input, truncations and corruptions of valid messages all
//! give `Err`, never a panic; valid messages round-trip.

use proptest::prelude::*;
use uipc_abi::ipc::msg::{MsgInfo, MsqidDs, MsqidSet};
use uipc_abi::ipc::sem::{SemInfo, Sembuf, SemidDs, Timespec};
use uipc_abi::ipc::shm::{ShmInfo, ShmSet, ShmUsage, ShmidDs};
use uipc_abi::ipc::IpcPermStat;
use uipc_abi::locks::Flock;
use uipc_proto::codec::Writer;
use uipc_proto::{LockLine, LockRequest, LockResponse, Request, Response, ResponseView, SemArg};

fn sembuf() -> impl Strategy<Value = Sembuf> {
    (any::<u16>(), any::<i16>(), any::<i16>()).prop_map(|(n, o, f)| Sembuf::new(n, o, f))
}

fn flock() -> impl Strategy<Value = Flock> {
    (
        any::<i16>(),
        any::<i16>(),
        any::<i64>(),
        any::<i64>(),
        any::<i32>(),
    )
        .prop_map(|(l_type, l_whence, l_start, l_len, l_pid)| Flock {
            l_type,
            l_whence,
            l_start,
            l_len,
            l_pid,
        })
}

fn lock_line() -> impl Strategy<Value = LockLine> {
    (
        any::<u8>(),
        any::<i16>(),
        any::<i32>(),
        any::<(u64, u64)>(),
        any::<(i64, i64)>(),
        proptest::option::of(any::<u32>()),
    )
        .prop_map(
            |(kind, l_type, pid, (dev, ino), (start, end), blocked_behind)| LockLine {
                kind,
                l_type,
                pid,
                dev,
                ino,
                start,
                end,
                blocked_behind,
            },
        )
}

fn sem_arg() -> impl Strategy<Value = SemArg> {
    prop_oneof![
        Just(SemArg::None),
        any::<i32>().prop_map(SemArg::Val),
        proptest::collection::vec(any::<u16>(), 0..10).prop_map(SemArg::Array),
        any::<(u32, u32, u32)>().prop_map(|(uid, gid, mode)| SemArg::Set { uid, gid, mode }),
    ]
}

fn msqid_set() -> impl Strategy<Value = MsqidSet> {
    any::<(u32, u32, u32, u64)>().prop_map(|(uid, gid, mode, qbytes)| MsqidSet {
        uid,
        gid,
        mode,
        qbytes,
    })
}

fn shm_set() -> impl Strategy<Value = ShmSet> {
    any::<(u32, u32, u32)>().prop_map(|(uid, gid, mode)| ShmSet { uid, gid, mode })
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u32>(), any::<bool>()).prop_map(|(version, new_image)| Request::Hello {
            version,
            new_image,
            area: 0,
        }),
        Just(Request::Cancel),
        Just(Request::SemArena),
        (any::<i32>(), any::<i32>(), any::<i32>()).prop_map(|(key, nsems, flag)| Request::Semget {
            key,
            nsems,
            flag
        }),
        (
            any::<i32>(),
            any::<u64>(),
            proptest::option::of(proptest::collection::vec(sembuf(), 0..20)),
            proptest::option::of((any::<i64>(), any::<i64>()))
        )
            .prop_map(|(semid, nsops, sops, t)| Request::Semtimedop {
                semid,
                nsops,
                sops,
                timeout: t.map(|(tv_sec, tv_nsec)| Timespec { tv_sec, tv_nsec }),
            }),
        (any::<(i32, i32, i32)>(), sem_arg()).prop_map(|((semid, semnum, cmd), arg)| {
            Request::Semctl {
                semid,
                semnum,
                cmd,
                arg,
            }
        }),
        (
            any::<(i32, i64, u64, i32)>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64))
        )
            .prop_map(|((msqid, mtype, msgsz, flags), text)| Request::Msgsnd {
                msqid,
                mtype,
                msgsz,
                text,
                flags
            }),
        (
            any::<i32>(),
            any::<i32>(),
            proptest::option::of(msqid_set())
        )
            .prop_map(|(msqid, cmd, set)| Request::Msgctl { msqid, cmd, set }),
        (any::<i32>(), any::<u64>(), any::<i32>())
            .prop_map(|(shmid, addr, flags)| Request::Shmat { shmid, addr, flags }),
        any::<i32>().prop_map(|child| Request::ForkChild { child }),
        (any::<i32>(), proptest::option::of(flock()))
            .prop_map(|(cmd, flock)| Request::Lock(LockRequest::Fcntl { cmd, flock })),
        any::<i32>().prop_map(|cmd| Request::Lock(LockRequest::Flock { cmd })),
        any::<i32>().prop_map(|fd| Request::Lock(LockRequest::Close { fd })),
        Just(Request::Lock(LockRequest::List)),
        Just(Request::Lock(LockRequest::Hints)),
        Just(Request::Lock(LockRequest::Leases)),
        Just(Request::Lock(LockRequest::FlockSlots)),
        any::<i32>().prop_map(|semid| Request::SemNsems { semid }),
        (any::<i32>(), any::<i32>()).prop_map(|(key, flag)| Request::Msgget { key, flag }),
        (any::<i32>(), any::<i64>(), any::<i64>(), any::<i32>()).prop_map(
            |(msqid, maxsize, msgtyp, flags)| Request::Msgrcv {
                msqid,
                maxsize,
                msgtyp,
                flags
            }
        ),
        (any::<i32>(), any::<u64>(), any::<i32>()).prop_map(|(key, size, flag)| Request::Shmget {
            key,
            size,
            flag
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(from, to)| Request::ShmMoved { from, to }),
        any::<u64>().prop_map(|addr| Request::Shmdt { addr }),
        (any::<u64>(), any::<bool>()).prop_map(|(addr, last)| Request::ShmRemap { addr, last }),
        (any::<i32>(), any::<i32>(), proptest::option::of(shm_set()))
            .prop_map(|(shmid, cmd, set)| Request::Shmctl { shmid, cmd, set }),
    ]
}

/// A strategy for `Response::$variant { ret, $field: $ty { $set..., ..Default::default() } }`
/// with `ret` and each `$set` field (of type `$x`) random.
macro_rules! with_ret {
    ($variant:ident, $field:ident: $ty:ident { $($set:ident: $x:ty),+ }) => {
        (any::<i32>(), $(any::<$x>()),+).prop_map(|(ret, $($set),+)| Response::$variant {
            ret,
            $field: $ty {
                $($set,)+
                ..Default::default()
            },
        })
    };
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        any::<i32>().prop_map(Response::Error),
        any::<i64>().prop_map(Response::Ret),
        flock().prop_map(|f| Response::Lock(LockResponse::Flock(f))),
        proptest::collection::vec(lock_line(), 0..5)
            .prop_map(|l| Response::Lock(LockResponse::List(l))),
        proptest::collection::vec(any::<u16>(), 0..10).prop_map(Response::SemAll),
        (any::<i64>(), proptest::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(mtype, text)| Response::Msg { mtype, text }),
        with_ret!(ShmStat, ds: ShmidDs { segsz: u64, nattch: u64 }),
        (any::<u32>(), any::<i32>(), any::<i32>())
            .prop_map(|(version, pid, area)| Response::Hello { version, pid, area }),
        (any::<i32>(), any::<u64>(), any::<i64>()).prop_map(|(ret, nsems, otime)| {
            Response::SemStat {
                ret,
                ds: SemidDs {
                    nsems,
                    otime,
                    perm: IpcPermStat {
                        key: ret,
                        mode: 0o600,
                        ..Default::default()
                    },
                    ..Default::default()
                },
            }
        }),
        with_ret!(SemInfo, info: SemInfo { semmni: i32 }),
        with_ret!(MsgStat, ds: MsqidDs { qnum: u64, lspid: i32 }),
        with_ret!(MsgInfo, info: MsgInfo { msgseg: u16 }),
        with_ret!(ShmInfo, info: ShmInfo { shmall: u64 }),
        with_ret!(ShmUsage, usage: ShmUsage { shm_rss: u64 }),
        (any::<i32>(), any::<u64>(), any::<bool>()).prop_map(|(shmid, addr, read_only)| {
            Response::ShmAttached {
                shmid,
                addr,
                size: 1,
                len: 4096,
                read_only,
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn random_bytes_never_panic_either_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = Request::decode(&bytes);
        let _ = Response::decode(&bytes);
    }

    #[test]
    fn random_bytes_after_a_valid_tag_never_panic(tag in 0u8..60, bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        let mut msg = vec![tag];
        msg.extend(bytes);
        let _ = Request::decode(&msg);
        let _ = Response::decode(&msg);
    }

    #[test]
    fn requests_round_trip_and_every_truncation_or_extension_fails(req in request(), extra in any::<u8>()) {
        let bytes = req.encode();
        prop_assert_eq!(Request::decode(&bytes), Ok(req));
        for cut in 0..bytes.len() {
            prop_assert!(Request::decode(&bytes[..cut]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(extra);
        prop_assert!(Request::decode(&longer).is_err());
    }

    #[test]
    fn responses_round_trip_and_every_truncation_fails(resp in response()) {
        let bytes = resp.encode();
        prop_assert_eq!(Response::decode(&bytes), Ok(resp));
        for cut in 0..bytes.len() {
            prop_assert!(Response::decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn a_fixed_buffer_holds_the_same_request_bytes_or_says_how_many_it_needs(req in request(), cap in 0usize..160) {
        let bytes = req.encode();
        let mut buf = vec![0u8; cap];
        let mut w = Writer::fixed(&mut buf);
        req.encode_into(&mut w);
        match w.written() {
            Ok(n) => {
                prop_assert_eq!(n, bytes.len());
                prop_assert_eq!(&buf[..n], &bytes[..]);
            }
            Err(e) => {
                prop_assert!(bytes.len() > cap);
                prop_assert_eq!(e.needed, bytes.len());
            }
        }
    }

    #[test]
    fn response_views_decode_to_the_response_and_borrow_its_data(resp in response()) {
        let bytes = resp.encode();
        let view = ResponseView::decode(&bytes).unwrap();
        match (&view, &resp) {
            (ResponseView::Msg { mtype, text }, Response::Msg { mtype: m, text: t }) => {
                prop_assert_eq!(mtype, m);
                prop_assert_eq!(*text, &t[..]);
            }
            (ResponseView::SemAll(raw), Response::SemAll(values)) => {
                let le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                prop_assert_eq!(*raw, &le[..]);
            }
            (ResponseView::Other(r), _) => prop_assert_eq!(r, &resp),
            _ => prop_assert!(false, "{:?} viewed as {:?}", resp, view),
        }
        prop_assert_eq!(view.into_owned(), resp);
    }

    #[test]
    fn a_flipped_byte_in_a_valid_request_never_panics(req in request(), at in any::<prop::sample::Index>(), v in any::<u8>()) {
        let mut bytes = req.encode();
        let i = at.index(bytes.len());
        bytes[i] = v;
        let _ = Request::decode(&bytes);
    }
}

#[test]
fn oversized_and_truncated_frames_are_errors_on_a_socket() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use uipc_proto::transport::{recv_frame, send_frame, RecvError};
    use uipc_proto::DecodeError;

    let (a, b) = UnixStream::pair().unwrap();
    send_frame(a.as_raw_fd(), &Request::Cancel.encode(), true, None).unwrap();
    let got = recv_frame(b.as_raw_fd(), false).unwrap();
    assert_eq!(Request::decode(&got.payload), Ok(Request::Cancel));
    (&a).write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(matches!(
        recv_frame(b.as_raw_fd(), false),
        Err(RecvError::Bad(DecodeError::Oversized(_)))
    ));
    let (a, b) = UnixStream::pair().unwrap();
    (&a).write_all(&10u32.to_le_bytes()).unwrap();
    (&a).write_all(&[1, 2, 3]).unwrap();
    drop(a);
    assert!(matches!(
        recv_frame(b.as_raw_fd(), false),
        Err(RecvError::Bad(DecodeError::Truncated))
    ));
    assert!(matches!(
        recv_frame(b.as_raw_fd(), false),
        Err(RecvError::Closed)
    ));
}
