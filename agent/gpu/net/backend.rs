//! What a training step needs from a device, the [`Backend`] trait, and the CPU reference
//! as one, [`Cpu`].

use crate::gpu::ops::{Bias, Conv, Gemm, Pool2, Relu, Sgd, ShapeError, Softmax};
use crate::gpu::reference;

/// What a training step needs from a device; the CPU reference and CUDA implement it.
/// Each kernel method maps to the `train.cu` kernel of the same name (`<name>_f32`): the
/// implementation checks the buffers with the descriptor's `check` and launches with its
/// `launch`.
pub trait Backend {
    /// A device buffer of `f32`.
    type F;
    /// A device buffer of `i32`.
    type I;
    /// The backend's error; shape errors come from the descriptors' checks.
    type Error: std::error::Error + Send + Sync + 'static + From<ShapeError>;

    /// A new buffer holding `data` (and likewise for `i32`).
    fn upload(&self, data: &[f32]) -> Result<Self::F, Self::Error>;
    /// A new `i32` buffer holding `data`.
    fn upload_i(&self, data: &[i32]) -> Result<Self::I, Self::Error>;
    /// A new buffer of `n` zeros (and likewise for `i32`).
    fn zeros(&self, n: usize) -> Result<Self::F, Self::Error>;
    /// A new `i32` buffer of `n` zeros.
    fn zeros_i(&self, n: usize) -> Result<Self::I, Self::Error>;
    /// Copies a buffer to the host (waiting for the work that writes it).
    fn download(&self, buf: &Self::F) -> Result<Vec<f32>, Self::Error>;
    /// Sets a whole buffer to 0.
    fn fill_zero(&self, buf: &mut Self::F) -> Result<(), Self::Error>;
    /// Waits for all launched work.
    fn synchronize(&self) -> Result<(), Self::Error>;

    /// `gemm_f32`: `C = alpha op(A) op(B) + beta C` on the matrices `d` picks.
    fn gemm(
        &self,
        d: &Gemm,
        alpha: f32,
        a: &Self::F,
        b: &Self::F,
        beta: f32,
        c: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `add_bias_f32`: adds `bias[ch]` to every element of channel `ch` of `y`.
    fn add_bias(&self, d: &Bias, y: &mut Self::F, bias: &Self::F) -> Result<(), Self::Error>;
    /// `bias_grad_f32`: `db[ch]` is the sum of channel `ch` of `dy` over images and positions.
    fn bias_grad(&self, d: &Bias, dy: &Self::F, db: &mut Self::F) -> Result<(), Self::Error>;
    /// `relu_fwd_f32`: `y = max(x, 0)`.
    fn relu_fwd(&self, d: &Relu, x: &Self::F, y: &mut Self::F) -> Result<(), Self::Error>;
    /// `relu_bwd_f32`: `dx = dy` where the pre-activation `x > 0`, else 0.
    fn relu_bwd(
        &self,
        d: &Relu,
        x: &Self::F,
        dy: &Self::F,
        dx: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `im2col` of the `image`-th image of `x` into the `image`-th matrix of `col`.
    fn im2col(
        &self,
        d: &Conv,
        image: usize,
        x: &Self::F,
        col: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `col2im` of the `image`-th matrix of `col` into the `image`-th image of `dx`.
    fn col2im(
        &self,
        d: &Conv,
        image: usize,
        col: &Self::F,
        dx: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `maxpool2_fwd_f32`: the max of each 2x2 window into `y`, and its flat input index into
    /// `argmax`.
    fn maxpool2_fwd(
        &self,
        d: &Pool2,
        x: &Self::F,
        y: &mut Self::F,
        argmax: &mut Self::I,
    ) -> Result<(), Self::Error>;
    /// `dx` must be zeroed first.
    fn maxpool2_bwd(
        &self,
        d: &Pool2,
        dy: &Self::F,
        argmax: &Self::I,
        dx: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `softmax_xent_f32`: each sample's cross-entropy `loss` and the gradient `dlogits` (divided
    /// by the batch size).
    fn softmax_xent(
        &self,
        d: &Softmax,
        logits: &Self::F,
        labels: &Self::I,
        loss: &mut Self::F,
        dlogits: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `sgd_momentum_f32`: `v = momentum v + g + weight_decay w`, then `w -= lr v`.
    fn sgd_momentum(
        &self,
        d: &Sgd,
        w: &mut Self::F,
        g: &Self::F,
        v: &mut Self::F,
    ) -> Result<(), Self::Error>;
}

/// The CPU reference as a backend: host vectors and the kernels of
/// [`mod@reference`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

impl Backend for Cpu {
    type F = Vec<f32>;
    type I = Vec<i32>;
    type Error = ShapeError;

    fn upload(&self, data: &[f32]) -> Result<Vec<f32>, ShapeError> {
        Ok(data.to_vec())
    }

    fn upload_i(&self, data: &[i32]) -> Result<Vec<i32>, ShapeError> {
        Ok(data.to_vec())
    }

    fn zeros(&self, n: usize) -> Result<Vec<f32>, ShapeError> {
        Ok(vec![0.0; n])
    }

    fn zeros_i(&self, n: usize) -> Result<Vec<i32>, ShapeError> {
        Ok(vec![0; n])
    }

    fn download(&self, buf: &Vec<f32>) -> Result<Vec<f32>, ShapeError> {
        Ok(buf.clone())
    }

    fn fill_zero(&self, buf: &mut Vec<f32>) -> Result<(), ShapeError> {
        buf.fill(0.0);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), ShapeError> {
        Ok(())
    }

    fn gemm(
        &self,
        d: &Gemm,
        alpha: f32,
        a: &Vec<f32>,
        b: &Vec<f32>,
        beta: f32,
        c: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        let [ra, rb, rc] = d.check(a.len(), b.len(), c.len())?;
        reference::gemm_f32(d, alpha, &a[ra], &b[rb], beta, &mut c[rc]);
        Ok(())
    }

    fn add_bias(&self, d: &Bias, y: &mut Vec<f32>, bias: &Vec<f32>) -> Result<(), ShapeError> {
        d.check(y.len(), bias.len())?;
        reference::add_bias_f32(d, y, bias);
        Ok(())
    }

    fn bias_grad(&self, d: &Bias, dy: &Vec<f32>, db: &mut Vec<f32>) -> Result<(), ShapeError> {
        d.check(dy.len(), db.len())?;
        reference::bias_grad_f32(d, dy, db);
        Ok(())
    }

    fn relu_fwd(&self, d: &Relu, x: &Vec<f32>, y: &mut Vec<f32>) -> Result<(), ShapeError> {
        d.check(&[("x", x.len()), ("y", y.len())])?;
        reference::relu_fwd_f32(d, x, y);
        Ok(())
    }

    fn relu_bwd(
        &self,
        d: &Relu,
        x: &Vec<f32>,
        dy: &Vec<f32>,
        dx: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(&[("x", x.len()), ("dy", dy.len()), ("dx", dx.len())])?;
        reference::relu_bwd_f32(d, x, dy, dx);
        Ok(())
    }

    fn im2col(
        &self,
        d: &Conv,
        image: usize,
        x: &Vec<f32>,
        col: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        let (rx, rc) = d.check(image, x.len(), col.len())?;
        reference::im2col_f32(d, &x[rx], &mut col[rc]);
        Ok(())
    }

    fn col2im(
        &self,
        d: &Conv,
        image: usize,
        col: &Vec<f32>,
        dx: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        let (rx, rc) = d.check(image, dx.len(), col.len())?;
        reference::col2im_f32(d, &col[rc], &mut dx[rx]);
        Ok(())
    }

    fn maxpool2_fwd(
        &self,
        d: &Pool2,
        x: &Vec<f32>,
        y: &mut Vec<f32>,
        argmax: &mut Vec<i32>,
    ) -> Result<(), ShapeError> {
        d.check(x.len(), y.len(), argmax.len())?;
        reference::maxpool2_fwd_f32(d, x, y, argmax);
        Ok(())
    }

    fn maxpool2_bwd(
        &self,
        d: &Pool2,
        dy: &Vec<f32>,
        argmax: &Vec<i32>,
        dx: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(dx.len(), dy.len(), argmax.len())?;
        reference::maxpool2_bwd_f32(d, dy, argmax, dx);
        Ok(())
    }

    fn softmax_xent(
        &self,
        d: &Softmax,
        logits: &Vec<f32>,
        labels: &Vec<i32>,
        loss: &mut Vec<f32>,
        dlogits: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(logits.len(), labels.len(), loss.len(), dlogits.len())?;
        reference::softmax_xent_f32(d, logits, labels, loss, dlogits);
        Ok(())
    }

    fn sgd_momentum(
        &self,
        d: &Sgd,
        w: &mut Vec<f32>,
        g: &Vec<f32>,
        v: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(w.len(), g.len(), v.len())?;
        reference::sgd_momentum_f32(d, w, g, v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_backend_checks_and_offsets() {
        let cpu = Cpu;
        // The second 1x2 by 2x1 product of a batch of two, written into the second slot.
        let g = Gemm::new(false, false, 1, 1, 2).at(1, 1, 1);
        let mut c = vec![0.0, 0.0];
        cpu.gemm(
            &g,
            1.0,
            &vec![9.0, 9.0, 1.0, 2.0],
            &vec![9.0, 9.0, 3.0, 4.0],
            0.0,
            &mut c,
        )
        .unwrap();
        assert_eq!(c, [0.0, 11.0]);
        assert!(cpu
            .gemm(&g, 1.0, &vec![0.0; 3], &vec![0.0; 4], 0.0, &mut c)
            .is_err());
        // col2im writes only the chosen image.
        let conv = Conv {
            c: 1,
            h: 2,
            w: 2,
            kh: 1,
            kw: 1,
            pad: 0,
            stride: 1,
        };
        let mut dx = vec![0.0; 8];
        cpu.col2im(
            &conv,
            1,
            &vec![0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0],
            &mut dx,
        )
        .unwrap();
        assert_eq!(dx, [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        let e = cpu
            .im2col(&conv, 2, &vec![0.0; 8], &mut vec![0.0; 8])
            .unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::Length {
                    buffer: "x",
                    expected: 12,
                    actual: 8,
                    ..
                }
            ),
            "{e}"
        );
    }
}
