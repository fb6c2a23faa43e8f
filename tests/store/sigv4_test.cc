// SignV4 against the worked example of AWS's S3 documentation ("Signature Calculations for the
// Authorization Header", GET Object): the published signature must come out, and SignedHeaders
// must list exactly the headers given.
#include "daemon/store/sigv4.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace profd::store {
namespace {

TEST(S3SigV4Test, AwsDocumentationGetObjectExample) {
  const std::string empty_sha256 =
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  SigV4Request request{"GET",
                       "/test.txt",
                       "",
                       {{"host", "examplebucket.s3.amazonaws.com"},
                        {"range", "bytes=0-9"},
                        {"x-amz-content-sha256", empty_sha256},
                        {"x-amz-date", "20130524T000000Z"}},
                       empty_sha256};
  SigV4Signature s =
      SignV4(request, "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
             "us-east-1", "20130524T000000Z");
  EXPECT_EQ(s.signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(S3SigV4Test, AmzDateIsUtcBasicFormat) {
  absl::Time t = absl::FromCivil(absl::CivilSecond(2026, 11, 30, 21, 5, 9), absl::UTCTimeZone());
  EXPECT_EQ(AmzDate(t), "20261130T210509Z");
}

}  // namespace
}  // namespace profd::store
