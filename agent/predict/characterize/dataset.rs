//! The built-in workload's dataset on disk: one file per sample under
//! `DIR/jpower-dataset/`, written once (and fsynced, so its pages are clean and can be
//! dropped) and kept for later sweeps while its manifest matches.
//!
//! A sample file is an encoded image, as a JPEG is: a header (`JPDS1`, the label), the
//! 16x16 image of the built-in CNN's task ([`Synthetic`]) as little-endian `f32`, filler
//! up to the sample's size, and an FNV-1a checksum of everything before it. Decoding
//! checks the checksum over the whole file, so its CPU cost grows with the sample's size
//! as a real decoder's does, and a torn or foreign file is an error, not a sample.

use crate::gpu::net::{Synthetic, PIXELS};
use crate::support::rng::SplitMix64;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// The folder under the dataset directory that holds the samples.
pub const FOLDER: &str = "jpower-dataset";
const MAGIC: &[u8; 5] = b"JPDS1";
/// Header: magic, label, the image.
const HEADER: usize = MAGIC.len() + 1 + PIXELS * 4;
/// Bytes of the trailing checksum.
const TAIL: usize = 8;
/// The smallest sample: a header and a checksum.
pub const MIN_SAMPLE_BYTES: usize = HEADER + TAIL;

/// What a dataset holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Samples.
    pub samples: u32,
    /// Bytes per sample file (at least [`MIN_SAMPLE_BYTES`]).
    pub sample_bytes: usize,
    /// The task's seed.
    pub seed: u64,
}

impl Shape {
    /// The manifest's text.
    fn manifest(&self) -> String {
        format!(
            "jpower dataset 1\nsamples {}\nsample_bytes {}\nseed {}\n",
            self.samples, self.sample_bytes, self.seed
        )
    }

    /// Bytes in all.
    pub fn bytes(&self) -> u64 {
        u64::from(self.samples) * self.sample_bytes as u64
    }
}

/// A dataset ready on disk.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The folder holding the sample files.
    pub dir: PathBuf,
    /// What it holds.
    pub shape: Shape,
}

/// Why a sample is not one.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// Reading it failed.
    #[error("reading {path}: {source}")]
    Read {
        /// The sample's file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Its bytes are not a sample of this format.
    #[error("{path}: not a jpower dataset sample ({why})")]
    Corrupt {
        /// The sample's file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
}

impl Dataset {
    /// The dataset of `shape` under `dir`: the one there when its manifest matches, else
    /// written anew (the folder's old contents removed first).
    pub fn prepare(dir: &Path, shape: Shape) -> io::Result<Dataset> {
        if shape.sample_bytes < MIN_SAMPLE_BYTES || shape.samples == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a dataset needs samples and at least {MIN_SAMPLE_BYTES} bytes per sample"),
            ));
        }
        let d = Dataset {
            dir: dir.join(FOLDER),
            shape,
        };
        let manifest = d.dir.join("manifest.txt");
        if fs::read_to_string(&manifest).is_ok_and(|m| m == shape.manifest()) {
            return Ok(d);
        }
        if d.dir.exists() {
            fs::remove_dir_all(&d.dir)?;
        }
        fs::create_dir_all(&d.dir)?;
        const CHUNK: usize = 64;
        let task = Synthetic::new(shape.seed, CHUNK);
        let mut rng = SplitMix64::new(shape.seed ^ 0xF111);
        let mut buf = Vec::with_capacity(shape.sample_bytes);
        for chunk in 0..u64::from(shape.samples).div_ceil(CHUNK as u64) {
            let (x, y) = task.batch(chunk);
            for (i, label) in y.iter().enumerate() {
                let n = chunk * CHUNK as u64 + i as u64;
                if n >= u64::from(shape.samples) {
                    break;
                }
                buf.clear();
                buf.extend_from_slice(MAGIC);
                buf.push(*label as u8);
                for v in &x[i * PIXELS..][..PIXELS] {
                    buf.extend_from_slice(&v.to_le_bytes());
                }
                while buf.len() < shape.sample_bytes - TAIL {
                    buf.push(rng.next_u64() as u8);
                }
                let sum = crate::support::hash::fnv1a(&buf);
                buf.extend_from_slice(&sum.to_le_bytes());
                let mut f = File::create(d.path(n as u32))?;
                f.write_all(&buf)?;
                f.sync_data()?;
            }
        }
        fs::write(&manifest, shape.manifest())?;
        File::open(&d.dir)?.sync_all()?;
        Ok(d)
    }

    /// Sample `n`'s file.
    pub fn path(&self, n: u32) -> PathBuf {
        self.dir.join(format!("{n:06}.jpds"))
    }

    /// Reads sample `n` into `buf` and decodes it: its image into `image` (`PIXELS`
    /// values), its label returned.
    pub fn load(&self, n: u32, buf: &mut Vec<u8>, image: &mut [f32]) -> Result<i32, SampleError> {
        let path = self.path(n);
        buf.clear();
        File::open(&path)
            .and_then(|mut f| io::Read::read_to_end(&mut f, buf))
            .map_err(|source| SampleError::Read {
                path: path.clone(),
                source,
            })?;
        decode(buf, image).map_err(|why| SampleError::Corrupt { path, why })
    }
}

/// A sample's image into `image` and its label.
fn decode(bytes: &[u8], image: &mut [f32]) -> Result<i32, &'static str> {
    if bytes.len() < MIN_SAMPLE_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Err("no header");
    }
    let (body, tail) = bytes.split_at(bytes.len() - TAIL);
    if crate::support::hash::fnv1a(body) != u64::from_le_bytes(tail.try_into().expect("TAIL bytes"))
    {
        return Err("checksum mismatch");
    }
    for (v, b) in image
        .iter_mut()
        .zip(body[MAGIC.len() + 1..HEADER].chunks_exact(4))
    {
        *v = f32::from_le_bytes(b.try_into().expect("chunks of 4"));
    }
    Ok(i32::from(body[MAGIC.len()]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_decode_to_the_tasks_images_and_a_torn_one_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let shape = Shape {
            samples: 70,
            sample_bytes: 4096,
            seed: 3,
        };
        let d = Dataset::prepare(tmp.path(), shape).unwrap();
        let (x, y) = Synthetic::new(3, 64).batch(1);
        let (mut buf, mut img) = (Vec::new(), vec![0.0; PIXELS]);
        assert_eq!(d.load(65, &mut buf, &mut img).unwrap(), y[1]);
        assert_eq!(img, x[PIXELS..2 * PIXELS]);
        assert_eq!(buf.len(), 4096);
        assert!(d.load(70, &mut buf, &mut img).is_err(), "no such sample");
        // Kept while the manifest matches; a torn file is caught by its checksum.
        let p = d.path(5);
        let mut bytes = fs::read(&p).unwrap();
        bytes[3000] ^= 1;
        fs::write(&p, &bytes).unwrap();
        let again = Dataset::prepare(tmp.path(), shape).unwrap();
        let e = again.load(5, &mut buf, &mut img).unwrap_err().to_string();
        assert!(e.contains("000005.jpds") && e.contains("checksum"), "{e}");
        // Another shape rewrites it.
        let other = Shape { seed: 4, ..shape };
        let d = Dataset::prepare(tmp.path(), other).unwrap();
        assert!(d.load(5, &mut buf, &mut img).is_ok());
        assert!(Dataset::prepare(
            tmp.path(),
            Shape {
                sample_bytes: 10,
                ..shape
            }
        )
        .is_err());
    }
}
