// The flight recorder's ring: bounded by bytes and by age, oldest dropped first and counted, and
// "covered since" the time from which every record is still held; and its duty windows' schedule.
#include "agent/cupti/recorder_ring.h"

#include "agent/cupti/flight_recorder.h"
#include "gtest/gtest.h"

namespace profagent {
namespace {

constexpr uint64_t kS = 1000000000ull;

RecorderRing::Chunk ChunkOf(size_t bytes, uint64_t records, uint64_t completed_ns) {
  RecorderRing::Chunk chunk;
  chunk.records.assign(bytes, 'r');
  chunk.records_count = records;
  chunk.completed_ns = completed_ns;
  return chunk;
}

TEST(RecorderRingTest, DropsTheOldestPastTheByteBoundAndCountsTheirRecords) {
  RecorderRing ring;
  ring.Configure(/*max_bytes=*/1000, /*span_ns=*/60 * kS);
  ring.Restart(100 * kS);
  ring.Add(ChunkOf(400, 4, 101 * kS));
  ring.Add(ChunkOf(400, 5, 102 * kS));
  EXPECT_EQ(ring.bytes(), 800u);
  EXPECT_EQ(ring.covered_since_ns(), 100 * kS);
  ring.Add(ChunkOf(400, 6, 103 * kS));  // 1200 > 1000: the first goes
  EXPECT_EQ(ring.bytes(), 800u);
  EXPECT_EQ(ring.chunks(), 2u);
  EXPECT_EQ(ring.dropped_records(), 4u);
  // Records that began after the dropped chunk completed are all still held.
  EXPECT_EQ(ring.covered_since_ns(), 101 * kS);
}

TEST(RecorderRingTest, DropsWhatIsOlderThanTheSpan) {
  RecorderRing ring;
  ring.Configure(1 << 20, 10 * kS);
  ring.Restart(0);
  for (uint64_t t = 1; t <= 20; ++t) ring.Add(ChunkOf(10, 1, t * kS));
  ring.DropExpired(20 * kS);
  EXPECT_EQ(ring.chunks(), 11u);  // completed at 10..20 s
  EXPECT_EQ(ring.dropped_records(), 9u);
  EXPECT_EQ(ring.covered_since_ns(), 9 * kS);
}

TEST(RecorderRingTest, SinceGivesTheChunksThatMayHoldRecordsFromThen) {
  RecorderRing ring;
  ring.Configure(1 << 20, 60 * kS);
  ring.Restart(0);
  for (uint64_t t = 1; t <= 5; ++t) ring.Add(ChunkOf(10, 1, t * kS));
  // A chunk completed before 3 s holds only records that began before it.
  auto since = ring.Since(3 * kS);
  ASSERT_EQ(since.size(), 3u);
  EXPECT_EQ(since.front()->completed_ns, 3 * kS);
  EXPECT_EQ(since.back()->completed_ns, 5 * kS);
  // What Since handed out stays valid when the ring lets it go.
  ring.Restart(10 * kS);
  EXPECT_EQ(ring.chunks(), 0u);
  EXPECT_EQ(ring.bytes(), 0u);
  EXPECT_EQ(since.front()->records.size(), 10u);
  EXPECT_EQ(ring.covered_since_ns(), 10 * kS);
}

TEST(RecorderRingTest, AChunkLargerThanTheBoundIsDroppedAtOnce) {
  RecorderRing ring;
  ring.Configure(100, 60 * kS);
  ring.Restart(1 * kS);
  ring.Add(ChunkOf(50, 2, 2 * kS));
  ring.Add(ChunkOf(500, 7, 3 * kS));
  EXPECT_EQ(ring.chunks(), 1u);
  EXPECT_EQ(ring.dropped_records(), 7u);
  EXPECT_EQ(ring.covered_since_ns(), 3 * kS);
  // A smaller bound drops at once what no longer fits.
  ring.Configure(10, 60 * kS);
  EXPECT_EQ(ring.chunks(), 0u);
  EXPECT_EQ(ring.dropped_records(), 9u);
}

TEST(DutyWindowTest, WindowsBeginOnWholeMultiplesOfThePeriodSinceTheEpoch) {
  constexpr uint64_t kMs = 1000000ull;
  // Two processes that turn the recorder on at different moments sample the same instants.
  const uint64_t a = 1764633600 * kS + 123 * kMs + 456;
  const uint64_t b = 1764633607 * kS + 999 * kMs;
  EXPECT_EQ(a + NsUntilDutyWindow(a, 1000), 1764633601 * kS);
  EXPECT_EQ(b + NsUntilDutyWindow(b, 1000), 1764633608 * kS);
  EXPECT_EQ(a + NsUntilDutyWindow(a, 100), 1764633600 * kS + 200 * kMs);
  // On a boundary, the window after it: a window just ended there.
  EXPECT_EQ(NsUntilDutyWindow(1764633608 * kS, 1000), 1000 * kMs);
  // A period that does not divide a second still counts from the epoch.
  EXPECT_EQ((a + NsUntilDutyWindow(a, 300)) % (300 * kMs), 0u);
  EXPECT_LE(NsUntilDutyWindow(a, 300), 300 * kMs);
}

}  // namespace
}  // namespace profagent
