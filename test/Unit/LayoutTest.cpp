//===- LayoutTest.cpp - scale-shape derivation ----------------------------===//

#include "coat/Numerics/Layout.h"

#include <gtest/gtest.h>

using namespace coat;
using Shape = std::vector<int64_t>;

TEST(Layout, PerTensorIsRankZero) {
  EXPECT_EQ(scaleShape({64, 128}, Scaling::perTensor()), Shape{});
  EXPECT_EQ(numScales({64, 128}, Scaling::perTensor()), 1);
}

TEST(Layout, PerGroupDividesInnermost) {
  EXPECT_EQ(scaleShape({8, 4096}, Scaling::perGroup(16)), (Shape{8, 256}));
  EXPECT_EQ(scaleShape({2, 3, 64}, Scaling::perGroup(32)), (Shape{2, 3, 2}));
  EXPECT_FALSE(verifyScalingForShape({8, 4096}, Scaling::perGroup(16)));
  auto err = verifyScalingForShape({8, 100}, Scaling::perGroup(16));
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("does not divide"), std::string::npos);
  EXPECT_TRUE(verifyScalingForShape({}, Scaling::perGroup(16)));
}

TEST(Layout, FlatGroupStraddlesRowsAndRoundsUp) {
  EXPECT_EQ(scaleShape({3, 100}, Scaling::flatGroup(128)), (Shape{3}));
  EXPECT_EQ(scaleShape({129}, Scaling::flatGroup(128)), (Shape{2}));
  EXPECT_EQ(scaleShape({128}, Scaling::flatGroup(128)), (Shape{1}));
  EXPECT_EQ(scaleShape({kDynamicExtent}, Scaling::flatGroup(128)),
            (Shape{kDynamicExtent}));
  EXPECT_EQ(scaleShape({4, kDynamicExtent}, Scaling::flatGroup(128)),
            (Shape{kDynamicExtent}));
}

TEST(Layout, PerBlockRoundsUpBothInnerDims) {
  EXPECT_EQ(scaleShape({300, 257}, Scaling::perBlock(128, 128)),
            (Shape{3, 3}));
  EXPECT_EQ(scaleShape({2, 256, 128}, Scaling::perBlock(128, 128)),
            (Shape{2, 2, 1}));
  EXPECT_TRUE(verifyScalingForShape({300}, Scaling::perBlock(128, 128)));
}

TEST(Layout, RejectsNonPositiveSizes) {
  EXPECT_TRUE(verifyScaling(Scaling::perGroup(0)));
  EXPECT_TRUE(verifyScaling(Scaling::flatGroup(-4)));
  EXPECT_TRUE(verifyScaling(Scaling::perBlock(128, 0)));
  EXPECT_TRUE(verifyScalingForShape({0, 16}, Scaling::perTensor()));
  EXPECT_TRUE(verifyScalingForShape({-3}, Scaling::perTensor()));
}

TEST(Layout, Names) {
  EXPECT_EQ(toString(Scaling::perGroup(16)), "per_group<16>");
  EXPECT_EQ(toString(Scaling::flatGroup(128)), "flat_group<128>");
  EXPECT_EQ(toString(Scaling::perBlock(128, 64)), "per_block<128x64>");
  EXPECT_EQ(toString(Scaling::perTensor()), "per_tensor");
}

TEST(Layout, ParsesTheNamesItPrints) {
  for (Scaling s : {Scaling::perTensor(), Scaling::perGroup(16),
                    Scaling::flatGroup(128), Scaling::perBlock(128, 64)})
    EXPECT_EQ(parseScaling(toString(s)), s) << toString(s);
  for (const char *bad : {"per_group", "per_group<>", "per_group<16", "per_group<1x2>",
                          "per_block<128>", "per_block<128x>", "per_tile<4>",
                          "per_tensor<1>", "flat_group<8>x", ""})
    EXPECT_FALSE(parseScaling(bad)) << bad;
}
