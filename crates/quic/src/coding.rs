//! Helpers for reading and writing wire values on `bytes` buffers.

use crate::varint::{UnexpectedEnd, VarInt};
use bytes::{Buf, BufMut};

/// Reading QUIC wire values from a buffer; every read fails cleanly on a short buffer.
pub trait BufExt: Buf {
    /// Reads a variable-length integer.
    fn get_var(&mut self) -> Result<VarInt, UnexpectedEnd>;
    /// Reads a variable-length integer as a `u64`.
    fn get_var_u64(&mut self) -> Result<u64, UnexpectedEnd> {
        self.get_var().map(VarInt::into_inner)
    }
    /// Reads one byte.
    fn read_u8(&mut self) -> Result<u8, UnexpectedEnd>;
    /// Reads a big-endian `u16`.
    fn read_u16(&mut self) -> Result<u16, UnexpectedEnd>;
    /// Reads a big-endian `u32`.
    fn read_u32(&mut self) -> Result<u32, UnexpectedEnd>;
    /// Copies exactly `out.len()` bytes into `out`.
    fn read_exact(&mut self, out: &mut [u8]) -> Result<(), UnexpectedEnd>;
}

impl<B: Buf + ?Sized> BufExt for B {
    fn get_var(&mut self) -> Result<VarInt, UnexpectedEnd> {
        VarInt::decode(self)
    }
    fn read_u8(&mut self) -> Result<u8, UnexpectedEnd> {
        if self.remaining() < 1 {
            return Err(UnexpectedEnd);
        }
        Ok(self.get_u8())
    }
    fn read_u16(&mut self) -> Result<u16, UnexpectedEnd> {
        if self.remaining() < 2 {
            return Err(UnexpectedEnd);
        }
        Ok(self.get_u16())
    }
    fn read_u32(&mut self) -> Result<u32, UnexpectedEnd> {
        if self.remaining() < 4 {
            return Err(UnexpectedEnd);
        }
        Ok(self.get_u32())
    }
    fn read_exact(&mut self, out: &mut [u8]) -> Result<(), UnexpectedEnd> {
        if self.remaining() < out.len() {
            return Err(UnexpectedEnd);
        }
        self.copy_to_slice(out);
        Ok(())
    }
}

/// Writing QUIC wire values to a buffer.
pub trait BufMutExt: BufMut {
    /// Writes a variable-length integer in its shortest form.
    fn put_var(&mut self, value: VarInt) {
        value.encode(self)
    }
    /// Writes a `u64` that the caller guarantees is below 2^62 as a variable-length integer.
    ///
    /// # Panics
    /// If `value` is 2^62 or more, a programming error.
    fn put_var_u64(&mut self, value: u64) {
        match VarInt::from_u64(value) {
            Ok(v) => v.encode(self),
            Err(e) => panic!("{e}"),
        }
    }
}

impl<B: BufMut + ?Sized> BufMutExt for B {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_fail() {
        let mut b: &[u8] = &[1];
        assert!(b.read_u16().is_err());
        assert_eq!(b.read_u8(), Ok(1));
        assert!(b.read_u8().is_err());
        let mut out = [0u8; 2];
        let mut b: &[u8] = &[1];
        assert!(b.read_exact(&mut out).is_err());
    }

    #[test]
    fn var_roundtrip() {
        let mut v = Vec::new();
        v.put_var_u64(300);
        let mut b = &v[..];
        assert_eq!(b.get_var_u64(), Ok(300));
    }
}
