#include "common/gzip_stream.h"

#include <isa-l/igzip_lib.h>

#include <algorithm>

namespace profd {
namespace {

// The output buffer: a flush of any size goes through it, so it does not grow with the input.
constexpr size_t kOutBytes = 64 * 1024;

// ISA-L's working memory for a level. Its token buffer sets how much input a deflate block may
// take; every Compress ends a block anyway (SYNC_FLUSH), so the small one does: the output is
// the same and each stream takes ~160 KiB in all.
uint32_t LevelBufferBytes(int level) {
  switch (level) {
    case 0:
      return ISAL_DEF_LVL0_SMALL;
    case 1:
      return ISAL_DEF_LVL1_SMALL;
    case 2:
      return ISAL_DEF_LVL2_SMALL;
    default:
      return ISAL_DEF_LVL3_SMALL;
  }
}

}  // namespace

GzipStream::GzipStream(int level)
    : zs_(std::make_unique<isal_zstream>()), out_(new uint8_t[kOutBytes]) {
  level = std::clamp(level, 0, 3);
  isal_deflate_init(zs_.get());
  zs_->gzip_flag = IGZIP_GZIP;
  zs_->level = static_cast<uint32_t>(level);
  zs_->level_buf_size = LevelBufferBytes(level);
  level_buffer_.reset(new uint8_t[zs_->level_buf_size]);
  zs_->level_buf = level_buffer_.get();
}

GzipStream::~GzipStream() = default;

absl::Status GzipStream::Compress(std::string_view in, bool finish, Sink sink) {
  if (finished_) return absl::FailedPreconditionError("gzip stream already finished");
  // ISA-L counts input in 32 bits: a larger input goes in pieces, the stream ends with the last.
  constexpr size_t kMaxPiece = size_t{1} << 30;
  do {
    const size_t piece = std::min(in.size(), kMaxPiece);
    const bool last = finish && piece == in.size();
    zs_->next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(in.data()));
    zs_->avail_in = static_cast<uint32_t>(piece);
    // Each call's input ends a deflate block: what was handed over is in the output when the
    // call returns (ISA-L would otherwise hold ~1.7 MB of trace JSON back, lost to a kill -9, where
    // the crash repair reads what is on disk), at no measured cost in speed or size.
    zs_->flush = last ? NO_FLUSH : SYNC_FLUSH;
    zs_->end_of_stream = last ? 1 : 0;
    while (true) {
      zs_->next_out = out_.get();
      zs_->avail_out = kOutBytes;
      if (isal_deflate(zs_.get()) != COMP_OK) {
        return absl::InternalError("gzip compression failed");
      }
      const size_t produced = kOutBytes - zs_->avail_out;
      if (produced > 0) {
        absl::Status written =
            sink(std::string_view(reinterpret_cast<const char*>(out_.get()), produced));
        if (!written.ok()) return written;
      }
      if (last ? zs_->internal_state.state == ZSTATE_END
               : zs_->avail_in == 0 && zs_->avail_out != 0) {
        break;
      }
    }
    in.remove_prefix(piece);
  } while (!in.empty());
  finished_ = finish;
  return absl::OkStatus();
}

std::string GzipStream::Gzip(std::string_view in, int level) {
  std::string out;
  GzipStream stream(level);
  absl::Status status = stream.Compress(in, true, [&](std::string_view bytes) {
    out.append(bytes);
    return absl::OkStatus();
  });
  return status.ok() ? out : "";
}

}  // namespace profd
