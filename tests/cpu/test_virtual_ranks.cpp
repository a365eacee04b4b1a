// SM partition arithmetic of virtual ranks (xstage/virtual_ranks.hpp) and the refusal of
// impossible configurations, without a GPU.
#include <gtest/gtest.h>

#include "xstage/virtual_ranks.hpp"

using namespace xstage;

TEST(SmSplit, H200SplitsIntoMultiplesOfEight) {
  SmSplit s;
  ASSERT_EQ(plan_sm_split(132, 2, &s), "");
  EXPECT_EQ(s.sms_per_rank, 64);
  EXPECT_EQ(s.unused, 4);
  ASSERT_EQ(plan_sm_split(132, 4, &s), "");
  EXPECT_EQ(s.sms_per_rank, 32);
  EXPECT_EQ(s.unused, 4);
  ASSERT_EQ(plan_sm_split(132, 8, &s), "");
  EXPECT_EQ(s.sms_per_rank, 16);
  EXPECT_EQ(s.unused, 4);
  ASSERT_EQ(plan_sm_split(132, 3, &s), "");
  EXPECT_EQ(s.sms_per_rank, 40);
  EXPECT_EQ(s.unused, 12);
  ASSERT_EQ(plan_sm_split(132, 1, &s), "");
  EXPECT_EQ(s.sms_per_rank, 128);
  EXPECT_EQ(describe(SmSplit{4, 32, 4}), "4 x 32 SMs (4 unused)");
}

TEST(SmSplit, ImpossibleSplitsSayWhy) {
  SmSplit s{7, 7, 7};
  EXPECT_NE(plan_sm_split(132, 9, &s).find("1..8"), std::string::npos);
  EXPECT_NE(plan_sm_split(132, 0, &s).find("1..8"), std::string::npos);
  const std::string why = plan_sm_split(16, 4, &s);
  EXPECT_NE(why.find("at most 2"), std::string::npos) << why;
  EXPECT_NE(plan_sm_split(0, 2, &s), "");
  EXPECT_EQ(s.ranks, 7) << "a refused split must not write its output";
}

TEST(SmSplit, LargestRankCount) {
  EXPECT_EQ(max_virtual_ranks(132), 8);
  EXPECT_EQ(max_virtual_ranks(24), 3);
  EXPECT_EQ(max_virtual_ranks(8), 1);
  EXPECT_EQ(max_virtual_ranks(7), 0);
}
