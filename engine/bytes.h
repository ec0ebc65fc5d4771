// engine/bytes.h — a small big-endian writer and a bounds-checked reader for
// the fixed layouts of the shim's own records (hellos and control bodies,
// engine/control.h; the socket-sharing protocol, engine/share_wire.h).
//
// A Reader never reads past its end: a short input makes ok() false and
// every later read returns zeros, so a decoder checks ok() once at the end.
//
// Thread-safety: value types.
#ifndef RDS_ENGINE_BYTES_H_
#define RDS_ENGINE_BYTES_H_

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/addr.h"

namespace rds::bytes {

class Writer {
 public:
  void U8(uint8_t v) { buf_.push_back(v); }
  void U16(uint16_t v) { Raw(htobe16(v)); }
  void U32(uint32_t v) { Raw(htobe32(v)); }
  void U64(uint64_t v) { Raw(htobe64(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Bytes(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  // A length (be32) and the bytes.
  void Blob(const void* p, size_t n) {
    U32(static_cast<uint32_t>(n));
    Bytes(p, n);
  }
  void Addr(const RdsAddr& a) {
    Bytes(a.bytes.data(), 16);
    U32(a.scope_id);
  }
  const std::vector<uint8_t>& bytes() const { return buf_; }
  std::vector<uint8_t> Take() { return std::move(buf_); }

 private:
  template <typename T>
  void Raw(T v) {
    Bytes(&v, sizeof(v));
  }
  std::vector<uint8_t> buf_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return n_ - off_; }
  uint8_t U8() { return Take<uint8_t>(); }
  uint16_t U16() { return be16toh(Take<uint16_t>()); }
  uint32_t U32() { return be32toh(Take<uint32_t>()); }
  uint64_t U64() { return be64toh(Take<uint64_t>()); }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  void Bytes(void* out, size_t n) {
    if (!ok_ || n > n_ - off_) {
      ok_ = false;
      std::memset(out, 0, n);
      return;
    }
    if (n) std::memcpy(out, p_ + off_, n);
    off_ += n;
  }
  // A Writer::Blob: its bytes (empty, and !ok(), if it runs past the end).
  std::vector<uint8_t> Blob() {
    uint32_t n = U32();
    if (!ok_ || n > n_ - off_) {
      ok_ = false;
      return {};
    }
    std::vector<uint8_t> out(p_ + off_, p_ + off_ + n);
    off_ += n;
    return out;
  }
  RdsAddr Addr() {
    RdsAddr a;
    Bytes(a.bytes.data(), 16);
    a.scope_id = U32();
    return a;
  }

 private:
  template <typename T>
  T Take() {
    T v;
    Bytes(&v, sizeof(v));
    return v;
  }
  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
  bool ok_ = true;
};

}  // namespace rds::bytes

#endif  // RDS_ENGINE_BYTES_H_
