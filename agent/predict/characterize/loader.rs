//! One epoch of the built-in training workload, with real data loading: the built-in CNN
//! ([`Net`]) trains on the on-disk [`Dataset`] in a shuffled order, `workers` loader
//! threads reading and decoding the sample files as PyTorch's `DataLoader` does (batch
//! `b` is loaded by worker `b mod workers`, each worker at most [`PREFETCH`] batches
//! ahead on its own bounded channel, the loop taking the batches in order; with no
//! workers the loop loads each batch itself). An epoch is `samples / batch` full
//! minibatches (the remainder dropped, as `drop_last` does).
//!
//! Each minibatch is timed in its two phases, as the agent's markers split it: **fetch**
//! (from asking for the batch to having it: the stall) and **compute** (upload and one
//! SGD step, finished on the device). [`Marks`] sends the markers (to the agent, which
//! answers with the minibatch's energy) or nothing.

use super::dataset::{Dataset, SampleError};
use crate::gpu::net::{Backend, Net, PIXELS};
use crossbeam_channel::{bounded, Receiver};
use std::time::Instant;

/// Batches each worker may hold ready (PyTorch's default `prefetch_factor`).
pub const PREFETCH: usize = 2;

/// Where a minibatch's phase markers go.
pub trait Marks {
    /// Minibatch `id` begins, waiting for its data.
    fn begin(&mut self, id: u64) -> Result<(), String>;
    /// Its data arrived: it computes.
    fn compute(&mut self, id: u64) -> Result<(), String>;
    /// It ended: the module energy measured over it, J (`None` without a meter).
    fn end(&mut self, id: u64) -> Result<Option<f64>, String>;
}

/// No markers, no energy.
pub struct Unmetered;

impl Marks for Unmetered {
    fn begin(&mut self, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn compute(&mut self, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn end(&mut self, _: u64) -> Result<Option<f64>, String> {
        Ok(None)
    }
}

/// Why an epoch stopped.
#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    /// A sample could not be loaded.
    #[error(transparent)]
    Sample(#[from] SampleError),
    /// The training step failed.
    #[error("training step: {0}")]
    Step(String),
    /// A marker could not be sent.
    #[error("minibatch marker: {0}")]
    Marks(String),
    /// Fewer samples than one minibatch.
    #[error("{samples} samples make no minibatch of {batch}")]
    NoMinibatch {
        /// Samples in the order.
        samples: usize,
        /// The minibatch size.
        batch: usize,
    },
}

/// What an epoch measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochFigures {
    /// Wall time, s.
    pub time_s: f64,
    /// Time in fetch, s.
    pub stall_s: f64,
    /// Time in compute, s.
    pub compute_s: f64,
    /// Module energy of its minibatches, J (`None` without a meter).
    pub energy_j: Option<f64>,
    /// Minibatches.
    pub minibatches: u64,
    /// Bytes of sample files read.
    pub bytes: u64,
    /// The last minibatch's loss.
    pub loss: f32,
}

/// A decoded minibatch: images and labels.
type Batch = (Vec<f32>, Vec<i32>);

/// Loads and decodes the samples `ids` into a batch; returns it and the bytes read.
fn load(ds: &Dataset, ids: &[u32], buf: &mut Vec<u8>) -> Result<(Batch, u64), SampleError> {
    let mut x = vec![0.0; ids.len() * PIXELS];
    let mut y = Vec::with_capacity(ids.len());
    let mut bytes = 0;
    for (&n, image) in ids.iter().zip(x.chunks_exact_mut(PIXELS)) {
        y.push(ds.load(n, buf, image)?);
        bytes += buf.len() as u64;
    }
    Ok(((x, y), bytes))
}

/// One epoch over `order` (sample numbers) in minibatches of `net`'s batch size, with
/// `workers` loader threads; minibatch ids from `first_id`.
pub fn epoch<B: Backend>(
    ds: &Dataset,
    order: &[u32],
    workers: u32,
    net: &mut Net<B>,
    lr: f32,
    marks: &mut dyn Marks,
    first_id: u64,
) -> Result<EpochFigures, EpochError> {
    let batch = net.batch();
    let batches: Vec<&[u32]> = order.chunks_exact(batch).collect();
    if batches.is_empty() {
        return Err(EpochError::NoMinibatch {
            samples: order.len(),
            batch,
        });
    }
    let workers = workers as usize;
    std::thread::scope(|s| {
        let queues: Vec<Receiver<Result<(Batch, u64), SampleError>>> = (0..workers)
            .map(|w| {
                let (tx, rx) = bounded(PREFETCH);
                let mine: Vec<&[u32]> = batches.iter().skip(w).step_by(workers).copied().collect();
                s.spawn(move || {
                    let mut buf = Vec::new();
                    for ids in mine {
                        // A closed queue: the loop stopped early; so does the worker.
                        if tx.send(load(ds, ids, &mut buf)).is_err() {
                            return;
                        }
                    }
                });
                rx
            })
            .collect();
        let mut buf = Vec::new();
        let start = Instant::now();
        let mut f = EpochFigures {
            time_s: 0.0,
            stall_s: 0.0,
            compute_s: 0.0,
            energy_j: Some(0.0),
            minibatches: 0,
            bytes: 0,
            loss: f32::NAN,
        };
        for (b, ids) in batches.iter().enumerate() {
            let id = first_id + b as u64;
            marks.begin(id).map_err(EpochError::Marks)?;
            let t0 = Instant::now();
            let ((x, y), bytes) = match queues.get(b % workers.max(1)) {
                Some(q) => q
                    .recv()
                    .expect("a worker sends each of its batches or an error")?,
                None => load(ds, ids, &mut buf)?,
            };
            let t1 = Instant::now();
            marks.compute(id).map_err(EpochError::Marks)?;
            let t2 = Instant::now();
            f.loss = net
                .step_host(&x, &y, lr)
                .map_err(|e| EpochError::Step(e.to_string()))?;
            let t3 = Instant::now();
            let energy = marks.end(id).map_err(EpochError::Marks)?;
            f.energy_j = f.energy_j.zip(energy).map(|(a, e)| a + e);
            f.stall_s += (t1 - t0).as_secs_f64();
            f.compute_s += (t3 - t2).as_secs_f64();
            f.bytes += bytes;
            f.minibatches += 1;
        }
        f.time_s = start.elapsed().as_secs_f64();
        Ok(f)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::net::Cpu;
    use crate::predict::characterize::dataset::Shape;

    /// Records the markers it gets and meters 1 J per minibatch.
    #[derive(Default)]
    struct Recorder(Vec<(char, u64)>);

    impl Marks for Recorder {
        fn begin(&mut self, id: u64) -> Result<(), String> {
            self.0.push(('b', id));
            Ok(())
        }
        fn compute(&mut self, id: u64) -> Result<(), String> {
            self.0.push(('c', id));
            Ok(())
        }
        fn end(&mut self, id: u64) -> Result<Option<f64>, String> {
            self.0.push(('e', id));
            Ok(Some(1.0))
        }
    }

    fn dataset(dir: &std::path::Path) -> Dataset {
        let shape = Shape {
            samples: 100,
            sample_bytes: 2048,
            seed: 9,
        };
        Dataset::prepare(dir, shape).unwrap()
    }

    #[test]
    fn every_worker_count_trains_the_same_minibatches_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path());
        let order: Vec<u32> = (0..100).rev().collect();
        let mut losses = Vec::new();
        for workers in [0, 1, 3] {
            let mut net = Net::new(Cpu, 16, 1).unwrap();
            let mut marks = Recorder::default();
            let f = epoch(&ds, &order, workers, &mut net, 0.05, &mut marks, 10).unwrap();
            assert_eq!(f.minibatches, 6, "drop_last: 100 / 16");
            assert_eq!(f.bytes, 6 * 16 * 2048);
            assert_eq!(f.energy_j, Some(6.0));
            assert!(f.stall_s + f.compute_s <= f.time_s && f.compute_s > 0.0);
            let want: Vec<(char, u64)> = (10..16)
                .flat_map(|id| [('b', id), ('c', id), ('e', id)])
                .collect();
            assert_eq!(marks.0, want);
            losses.push(f.loss);
        }
        // The same batches in the same order: the same training, whoever loaded them.
        assert_eq!(losses[0], losses[1]);
        assert_eq!(losses[0], losses[2]);
    }

    #[test]
    fn a_bad_sample_stops_the_epoch_with_its_path_and_the_workers_end() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path());
        std::fs::write(ds.path(40), b"JPDS1 torn").unwrap();
        let order: Vec<u32> = (0..100).collect();
        for workers in [0, 2] {
            let mut net = Net::new(Cpu, 8, 1).unwrap();
            let e = epoch(&ds, &order, workers, &mut net, 0.05, &mut Unmetered, 0)
                .unwrap_err()
                .to_string();
            assert!(e.contains("000040.jpds"), "{e}");
        }
        let mut net = Net::new(Cpu, 8, 1).unwrap();
        let e = epoch(&ds, &order[..5], 1, &mut net, 0.05, &mut Unmetered, 0).unwrap_err();
        assert!(matches!(
            e,
            EpochError::NoMinibatch {
                samples: 5,
                batch: 8
            }
        ));
    }
}
