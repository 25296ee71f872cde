//! SQLite's write-ahead log (`<db>-wal`), read the way SQLite reads it, to see what SQLite
//! would silently drop.
//!
//! SQLite replays the WAL's frames up to the first whose checksum fails and ignores the rest:
//! a changed byte in the middle of the WAL quietly loses every commit after it, and the next
//! writer reuses their seqs. So the gate reads the WAL itself before SQLite opens it (the
//! format is documented at <https://www.sqlite.org/fileformat2.html#walformat>): a frame whose
//! checksum fails followed by a commit frame that verifies is damage. Frames that merely end
//! early (a kill mid-write, a transaction never committed) are not.
//!
//! Layout: a 32-byte header (magic, version, page size, checkpoint count, two salts, two
//! checksums), then frames of a 24-byte header (page number, database size for a commit frame
//! or 0, the two salts, two checksums) and one page. Each checksum continues the one before it
//! (the header's for the first frame) over the frame header's first 8 bytes and the page.

/// The header's magic with little-endian checksums; one more means big-endian.
const MAGIC_LE: u32 = 0x377f_0682;
const MAGIC_BE: u32 = 0x377f_0683;
const HEADER: usize = 32;
const FRAME_HEADER: usize = 24;

/// What reading a WAL found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WalState {
    /// Nothing SQLite would drop (a torn or uncommitted tail is not damage).
    Whole,
    /// SQLite stops at a frame (`why` says which) of `frames`, losing `commits_after` commits
    /// that still verify after it.
    Damaged {
        frames: usize,
        commits_after: usize,
        why: String,
    },
}

/// Reads a WAL file's bytes as SQLite would, and says whether SQLite would drop commits.
pub(crate) fn inspect(bytes: &[u8]) -> WalState {
    if bytes.len() < HEADER {
        return WalState::Whole;
    }
    let frames = Frames::new(bytes);
    let Some(frames) = frames else {
        return WalState::Whole;
    };
    if !frames.header_verifies() {
        // SQLite ignores the whole WAL; damage if commit frames that agree with each other
        // follow (salts of their own, checksums chained from one to the next).
        let commits = frames.commits_chained_from(0);
        return if commits > 0 {
            WalState::Damaged {
                frames: frames.count,
                commits_after: commits,
                why: "its header's checksum does not match".to_owned(),
            }
        } else {
            WalState::Whole
        };
    }
    let mut sum = frames.header_sum();
    for index in 0..frames.count {
        let (salted, verified) = frames.verify(index, sum);
        if !salted {
            // A frame of an earlier generation of the WAL: SQLite ends here, rightly.
            return WalState::Whole;
        }
        match verified {
            Some(next) => sum = next,
            None => {
                let commits = frames.commits_chained_from(index + 1);
                if commits == 0 {
                    return WalState::Whole;
                }
                return WalState::Damaged {
                    frames: frames.count,
                    commits_after: commits,
                    why: format!("frame {} of {} fails its checksum", index + 1, frames.count),
                };
            }
        }
    }
    WalState::Whole
}

/// A copy of a damaged WAL that SQLite replays to its last commit: every frame of the WAL's
/// generation re-checksummed in order, the damaged one included (its page may then read as
/// damaged, which a recovery walks around). For a recovery only: the original is kept.
pub(crate) fn rechain(bytes: &[u8]) -> Option<Vec<u8>> {
    let frames = Frames::new(bytes)?;
    let mut out = bytes[..HEADER].to_vec();
    // The salts of the frames, if the header's were damaged.
    let salts = if frames.header_verifies() || frames.count == 0 {
        frames.header_salts()
    } else {
        frames.salts(0)
    };
    out[16..24].copy_from_slice(&salts);
    let header_sum = checksum(frames.big_endian, (0, 0), &out[..24]);
    put_sum(&mut out[24..32], header_sum);
    let mut sum = header_sum;
    let mut committed = out.len();
    for index in 0..frames.count {
        if frames.salts(index) != salts {
            break;
        }
        let frame = frames.frame(index);
        let mut copy = frame.to_vec();
        sum = checksum(frames.big_endian, sum, &copy[..8]);
        sum = checksum(frames.big_endian, sum, &copy[FRAME_HEADER..]);
        put_sum(&mut copy[16..24], sum);
        out.extend_from_slice(&copy);
        if frames.is_commit(index) {
            committed = out.len();
        }
    }
    out.truncate(committed);
    Some(out)
}

/// A WAL's frames, over its bytes.
struct Frames<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    page: usize,
    count: usize,
}

impl<'a> Frames<'a> {
    fn new(bytes: &'a [u8]) -> Option<Frames<'a>> {
        if bytes.len() < HEADER {
            return None;
        }
        let big_endian = match be32(bytes, 0)? {
            MAGIC_LE => false,
            MAGIC_BE => true,
            _ => return None,
        };
        let page = be32(bytes, 8)? as usize;
        if !(512..=65536).contains(&page) || !page.is_power_of_two() {
            return None;
        }
        let count = (bytes.len() - HEADER) / (FRAME_HEADER + page);
        Some(Frames {
            bytes,
            big_endian,
            page,
            count,
        })
    }

    fn header_sum(&self) -> (u32, u32) {
        (
            be32(self.bytes, 24).unwrap_or(0),
            be32(self.bytes, 28).unwrap_or(0),
        )
    }

    fn header_verifies(&self) -> bool {
        checksum(self.big_endian, (0, 0), &self.bytes[..24]) == self.header_sum()
    }

    fn header_salts(&self) -> [u8; 8] {
        let mut salts = [0; 8];
        salts.copy_from_slice(&self.bytes[16..24]);
        salts
    }

    fn frame(&self, index: usize) -> &'a [u8] {
        let start = HEADER + index * (FRAME_HEADER + self.page);
        &self.bytes[start..start + FRAME_HEADER + self.page]
    }

    fn salts(&self, index: usize) -> [u8; 8] {
        let mut salts = [0; 8];
        salts.copy_from_slice(&self.frame(index)[8..16]);
        salts
    }

    fn stored_sum(&self, index: usize) -> (u32, u32) {
        let frame = self.frame(index);
        (be32(frame, 16).unwrap_or(0), be32(frame, 20).unwrap_or(0))
    }

    fn is_commit(&self, index: usize) -> bool {
        be32(self.frame(index), 4).is_some_and(|size| size != 0)
    }

    /// Whether frame `index` carries the header's salts, and its checksum continued from
    /// `sum` if it verifies.
    fn verify(&self, index: usize, sum: (u32, u32)) -> (bool, Option<(u32, u32)>) {
        if self.salts(index) != self.header_salts() {
            return (false, None);
        }
        let frame = self.frame(index);
        let next = checksum(self.big_endian, sum, &frame[..8]);
        let next = checksum(self.big_endian, next, &frame[FRAME_HEADER..]);
        (true, (next == self.stored_sum(index)).then_some(next))
    }

    /// Commit frames from `from` on that verify when chained from the stored checksum of the
    /// frame before them, with the salts of the frame at `from`: commits written after a
    /// frame SQLite stops at.
    fn commits_chained_from(&self, from: usize) -> usize {
        if from >= self.count {
            return 0;
        }
        let salts = self.salts(from);
        let mut commits = 0;
        for index in from.max(1)..self.count {
            if self.salts(index) != salts {
                break;
            }
            let frame = self.frame(index);
            let seed = self.stored_sum(index - 1);
            let sum = checksum(self.big_endian, seed, &frame[..8]);
            let sum = checksum(self.big_endian, sum, &frame[FRAME_HEADER..]);
            if sum == self.stored_sum(index) && self.is_commit(index) {
                commits += 1;
            }
        }
        commits
    }
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn put_sum(out: &mut [u8], (s0, s1): (u32, u32)) {
    out[..4].copy_from_slice(&s0.to_be_bytes());
    out[4..8].copy_from_slice(&s1.to_be_bytes());
}

/// SQLite's WAL checksum of `data` (a multiple of 8 bytes), continuing `(s0, s1)`.
fn checksum(big_endian: bool, (mut s0, mut s1): (u32, u32), data: &[u8]) -> (u32, u32) {
    let word = |b: &[u8]| {
        let b = [b[0], b[1], b[2], b[3]];
        if big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    for pair in data.chunks_exact(8) {
        s0 = s0.wrapping_add(word(&pair[..4])).wrapping_add(s1);
        s1 = s1.wrapping_add(word(&pair[4..])).wrapping_add(s0);
    }
    (s0, s1)
}
