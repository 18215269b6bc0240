//! The wire bytes of the requests the preload encodes from borrowed memory (semctl, msgsnd,
//! semtimedop), written out by hand from the format: the tag byte, little-endian integers, a
//! list or byte string as a u32 count then its elements, an `Option` as a 0/1 byte then the
//! value, semctl's argument as a kind byte (0 none, 1 val, 2 array, 3 set) then its fields.
//!
//! Each case checks that the owned `Request::encode`, and the borrowed `put_*` path the
//! preload uses (into a fixed buffer, with SETALL values and semaphore operations taken from
//! kernel-layout bytes), write exactly those bytes, and that they decode back to the request.

use uipc_abi::ipc::sem::{Sembuf, Timespec};
use uipc_proto::codec::Writer;
use uipc_proto::request::{
    put_msgsnd, put_sem_arg, put_sem_arg_array, put_semctl_head, put_semtimedop,
};
use uipc_proto::{Request, SemArg};

/// The bytes `put` writes into a fixed buffer, checked to have fitted.
fn fixed(put: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let mut w = Writer::fixed(&mut buf);
    put(&mut w);
    let n = w.written().expect("the test buffer holds every case");
    buf[..n].to_vec()
}

/// The borrowed encoding of `req` as the preload writes it.
fn borrowed(req: &Request) -> Vec<u8> {
    match req {
        Request::Semctl {
            semid,
            semnum,
            cmd,
            arg,
        } => fixed(|w| {
            put_semctl_head(w, *semid, *semnum, *cmd);
            match arg {
                SemArg::Array(values) => {
                    // As the caller's `unsigned short` array lies in memory.
                    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                    let values = raw.chunks_exact(2);
                    put_sem_arg_array(w, values.map(|c| u16::from_le_bytes([c[0], c[1]])));
                }
                other => put_sem_arg(w, other),
            }
        }),
        Request::Msgsnd {
            msqid,
            mtype,
            msgsz,
            text,
            flags,
        } => fixed(|w| put_msgsnd(w, *msqid, *mtype, *msgsz, text.as_deref(), *flags)),
        Request::Semtimedop {
            semid,
            nsops,
            sops,
            timeout,
        } => {
            // struct sembuf as the caller's memory holds it: num, op, flg, 2 bytes each.
            let raw: Option<Vec<u8>> = sops.as_ref().map(|ops| {
                ops.iter()
                    .flat_map(|b| {
                        let mut c = b.sem_num.to_le_bytes().to_vec();
                        c.extend(b.sem_op.to_le_bytes());
                        c.extend(b.sem_flg.to_le_bytes());
                        c
                    })
                    .collect()
            });
            fixed(|w| {
                let ops = raw.as_ref().map(|raw| {
                    raw.chunks_exact(6).map(|c| {
                        Sembuf::new(
                            u16::from_le_bytes([c[0], c[1]]),
                            i16::from_le_bytes([c[2], c[3]]),
                            i16::from_le_bytes([c[4], c[5]]),
                        )
                    })
                });
                put_semtimedop(w, *semid, *nsops, ops, *timeout);
            })
        }
        other => panic!("no borrowed encoder for {other:?}"),
    }
}

fn check(req: Request, want: &[u8]) {
    assert_eq!(req.encode(), want, "owned encoding of {req:?}");
    assert_eq!(borrowed(&req), want, "borrowed encoding of {req:?}");
    assert_eq!(Request::decode(want), Ok(req));
}

#[test]
fn semctl_without_an_argument() {
    #[rustfmt::skip]
    let want = [
        13,             // SEMCTL
        4, 3, 2, 1,     // semid 0x01020304
        2, 0, 0, 0,     // semnum
        0, 0, 0, 0,     // cmd IPC_RMID
        0,              // no argument
    ];
    let req = Request::Semctl {
        semid: 0x0102_0304,
        semnum: 2,
        cmd: 0,
        arg: SemArg::None,
    };
    check(req, &want);
}

#[test]
fn semctl_setval_with_negative_numbers() {
    #[rustfmt::skip]
    let want = [
        13,
        7, 0, 0, 0,
        0xff, 0xff, 0xff, 0xff, // semnum -1
        16, 0, 0, 0,            // SETVAL
        1,                      // a value
        0xfe, 0xff, 0xff, 0xff, // -2
    ];
    let req = Request::Semctl {
        semid: 7,
        semnum: -1,
        cmd: 16,
        arg: SemArg::Val(-2),
    };
    check(req, &want);
}

#[test]
fn semctl_setall_values_and_an_empty_array() {
    #[rustfmt::skip]
    let want = [
        13,
        7, 0, 0, 0,
        0, 0, 0, 0,
        17, 0, 0, 0,    // SETALL
        2,              // an array
        3, 0, 0, 0,     // of 3 values
        1, 0,
        0x34, 0x12,
        0xff, 0xff,
    ];
    let req = Request::Semctl {
        semid: 7,
        semnum: 0,
        cmd: 17,
        arg: SemArg::Array(vec![1, 0x1234, 0xffff]),
    };
    check(req, &want);
    #[rustfmt::skip]
    let want = [
        13,
        0x80, 0, 0, 0x80,   // semid i32::MIN + 0x80
        0, 0, 0, 0,
        17, 0, 0, 0,
        2,
        0, 0, 0, 0,         // no values
    ];
    let req = Request::Semctl {
        semid: i32::MIN + 0x80,
        semnum: 0,
        cmd: 17,
        arg: SemArg::Array(vec![]),
    };
    check(req, &want);
}

#[test]
fn semctl_ipc_set() {
    #[rustfmt::skip]
    let want = [
        13,
        9, 0, 0, 0,
        0, 0, 0, 0,
        1, 0, 0, 0,             // IPC_SET
        3,                      // owner, group, mode
        0xe8, 0x03, 0, 0,       // uid 1000
        0xff, 0xff, 0xff, 0xff, // gid u32::MAX
        0xa0, 0x01, 0, 0,       // mode 0o640
    ];
    let req = Request::Semctl {
        semid: 9,
        semnum: 0,
        cmd: 1,
        arg: SemArg::Set {
            uid: 1000,
            gid: u32::MAX,
            mode: 0o640,
        },
    };
    check(req, &want);
}

#[test]
fn msgsnd_with_text_empty_text_and_no_text() {
    #[rustfmt::skip]
    let want = [
        21,                                         // MSGSND
        0xff, 0xff, 0xff, 0xff,                     // msqid -1
        1, 0, 0, 0, 0, 0, 0, 0,                     // mtype 1
        3, 0, 0, 0, 0, 0, 0, 0,                     // msgsz 3
        1,                                          // text read
        3, 0, 0, 0, b'a', b'b', b'c',
        0, 0x08, 0, 0,                              // IPC_NOWAIT
    ];
    let req = Request::Msgsnd {
        msqid: -1,
        mtype: 1,
        msgsz: 3,
        text: Some(b"abc".to_vec()),
        flags: 0o4000,
    };
    check(req, &want);
    #[rustfmt::skip]
    let want = [
        21,
        3, 0, 0, 0,
        0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // mtype -5
        0, 0, 0, 0, 0, 0, 0, 0,
        1,
        0, 0, 0, 0,                                     // no bytes
        0, 0, 0, 0,
    ];
    let req = Request::Msgsnd {
        msqid: 3,
        mtype: -5,
        msgsz: 0,
        text: Some(vec![]),
        flags: 0,
    };
    check(req, &want);
    #[rustfmt::skip]
    let want = [
        21,
        9, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0x80,                      // i64::MIN
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // u64::MAX
        0,                                              // text unreadable
        0xff, 0xff, 0xff, 0xff,                         // flags -1
    ];
    let req = Request::Msgsnd {
        msqid: 9,
        mtype: i64::MIN,
        msgsz: u64::MAX,
        text: None,
        flags: -1,
    };
    check(req, &want);
}

#[test]
fn semtimedop_with_and_without_operations() {
    #[rustfmt::skip]
    let want = [
        11,                         // SEMTIMEDOP
        2, 0, 0, 0,
        2, 0, 0, 0, 0, 0, 0, 0,     // nsops
        1,                          // operations read
        2, 0, 0, 0,
        1, 0, 0xff, 0xff, 0, 0x10,  // sem 1, op -1, SEM_UNDO
        0, 0, 0, 0, 0, 0x08,        // sem 0, op 0, IPC_NOWAIT
        1,                          // a timeout
        1, 0, 0, 0, 0, 0, 0, 0,
        0xf4, 0x01, 0, 0, 0, 0, 0, 0,
    ];
    let req = Request::Semtimedop {
        semid: 2,
        nsops: 2,
        sops: Some(vec![Sembuf::new(1, -1, 0x1000), Sembuf::new(0, 0, 0x800)]),
        timeout: Some(Timespec {
            tv_sec: 1,
            tv_nsec: 500,
        }),
    };
    check(req, &want);
    #[rustfmt::skip]
    let want = [
        11,
        2, 0, 0, 0,
        1, 0, 1, 0, 0, 0, 0, 0, // nsops 0x10001
        0,                      // operations not read
        0,                      // no timeout
    ];
    let req = Request::Semtimedop {
        semid: 2,
        nsops: 0x1_0001,
        sops: None,
        timeout: None,
    };
    check(req, &want);
}
