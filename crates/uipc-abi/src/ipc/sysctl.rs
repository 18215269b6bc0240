//! The IPC tunables of `/proc/sys/kernel`.

/// The tunables, by their `/proc/sys/kernel` file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sysctl {
    /// `sem`: "SEMMSL SEMMNS SEMOPM SEMMNI".
    Sem,
    /// `msgmax`.
    MsgMax,
    /// `msgmnb`.
    MsgMnb,
    /// `msgmni`.
    MsgMni,
    /// `shmmax`.
    ShmMax,
    /// `shmall`.
    ShmAll,
    /// `shmmni`.
    ShmMni,
    /// `shm_rmid_forced`.
    ShmRmidForced,
    /// `sem_next_id`.
    SemNextId,
    /// `msg_next_id`.
    MsgNextId,
    /// `shm_next_id`.
    ShmNextId,
}

impl Sysctl {
    /// Every tunable, the limits first, then the `*_next_id` files.
    pub const ALL: [Sysctl; 11] = [
        Sysctl::Sem,
        Sysctl::MsgMax,
        Sysctl::MsgMnb,
        Sysctl::MsgMni,
        Sysctl::ShmMax,
        Sysctl::ShmAll,
        Sysctl::ShmMni,
        Sysctl::ShmRmidForced,
        Sysctl::SemNextId,
        Sysctl::MsgNextId,
        Sysctl::ShmNextId,
    ];

    /// The limits: [`Sysctl::ALL`] without the `*_next_id` files, in the same order.
    pub const LIMITS: &'static [Sysctl] = Sysctl::ALL.split_at(8).0;

    /// Its file name under `/proc/sys/kernel`.
    pub fn name(self) -> &'static str {
        match self {
            Sysctl::Sem => "sem",
            Sysctl::MsgMax => "msgmax",
            Sysctl::MsgMnb => "msgmnb",
            Sysctl::MsgMni => "msgmni",
            Sysctl::ShmMax => "shmmax",
            Sysctl::ShmAll => "shmall",
            Sysctl::ShmMni => "shmmni",
            Sysctl::ShmRmidForced => "shm_rmid_forced",
            Sysctl::SemNextId => "sem_next_id",
            Sysctl::MsgNextId => "msg_next_id",
            Sysctl::ShmNextId => "shm_next_id",
        }
    }

    /// The tunable whose file is `/proc/sys/kernel/NAME`.
    pub fn by_name(name: &str) -> Option<Sysctl> {
        Sysctl::ALL.into_iter().find(|s| s.name() == name)
    }
}
