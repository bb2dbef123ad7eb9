//! Plain old data: types whose values are their bytes, so they can be sent by copying those bytes
//! into a log and received by copying them out (`crate::PodCodec`). The unsafe part of typed
//! messages, kept in the region layer.

/// A type whose every value is just its bytes: `Copy`, no padding, no pointers, and any bit
/// pattern of its size is a valid value (integers, floats, arrays of them, `#[repr(C)]` structs
/// of them without padding).
///
/// # Safety
/// Implementors guarantee the above: sending reads every byte of a value (padding would be
/// uninitialised memory), and receiving makes a value from whatever bytes a peer wrote.
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive number: no padding, every bit pattern valid.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

// SAFETY: an array of Pod has no padding between elements (size is a multiple of alignment) and
// every bit pattern of each element is valid.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// The bytes of `value`.
pub(crate) fn as_bytes<T: Pod>(value: &T) -> &[u8] {
    // SAFETY: `T: Pod` has no padding, so all `size_of::<T>()` bytes behind the reference are
    // initialised; the slice borrows `value` and cannot outlive it.
    unsafe { std::slice::from_raw_parts(value as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// A value read from `bytes`, which must be exactly `size_of::<T>()` long (`None` otherwise).
/// Copies: the result never points into `bytes` (which may be a log another process writes).
pub(crate) fn read<T: Pod>(bytes: &[u8]) -> Option<T> {
    if bytes.len() != std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length is checked; an unaligned read copies the bytes; `T: Pod` makes any bit
    // pattern a valid value.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const T) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_their_bytes_and_wrong_lengths_are_refused() {
        let v: [u32; 3] = [1, 0xdead_beef, 7];
        let bytes = as_bytes(&v).to_vec();
        assert_eq!(bytes.len(), 12);
        assert_eq!(read::<[u32; 3]>(&bytes), Some(v));
        assert_eq!(read::<[u32; 3]>(&bytes[..11]), None);
        assert_eq!(read::<u64>(&[1, 0, 0, 0, 0, 0, 0, 0]), Some(1));
        // Unaligned source.
        let shifted = [[0u8].as_slice(), &bytes].concat();
        assert_eq!(read::<[u32; 3]>(&shifted[1..]), Some(v));
    }
}
