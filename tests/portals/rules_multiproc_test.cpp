// One test per rule of PORTALS4.md §6 that moves data between an initiator
// and a target, across two processes: portals_rules_job RULE under pier-run,
// over shm and over tcp (the driver is in the test name). Each rank checks
// its own side and prints "rank R: ok"; a failed check prints the value seen
// and the value expected. pier-run kills a job that outlives --timeout.
#include <gtest/gtest.h>

#include <string>

#include "run_command.hpp"

namespace pier::portals::test {
namespace {

class PortalsRule : public ::testing::TestWithParam<std::string> {
 protected:
  /// Runs `rule` on two ranks with a logical (or physical) NI; both must
  /// finish with "ok".
  void expect_rule(const char* rule, const char* addressing = "logical") {
    multiproc::RunSpec spec;
    spec.argv = {PIER_RUN_PATH,          "-n", "2",       "--timeout", "60", "--kill-grace", "2",
                 PORTALS_RULES_JOB_PATH, rule, addressing};
    spec.env = {"PIER_CORE_DRIVERS=self," + GetParam()};
    spec.limit = std::chrono::seconds(75);  // pier-run's own --timeout ends first
    const multiproc::Outcome o = multiproc::run_command(spec);
    ASSERT_FALSE(o.timed_out) << o.output;
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_NE(o.output.find("rank 0: ok"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("rank 1: ok"), std::string::npos) << o.output;
  }
};

// §6.2 Logical vs physical addressing.
TEST_P(PortalsRule, R_P1_PhysicalIdsAndIndependentWildcardsMatch) {
  expect_rule("R-P1", "physical");
}
TEST_P(PortalsRule, R_P2_LogicalRanksMatchAndEventsNameTheRank) {
  expect_rule("R-P2");
}
TEST_P(PortalsRule, R_P4_RankIsTheIndexOfTheOwnPhysicalIdInTheMap) {
  expect_rule("R-P4");
}

// §6.3 Portal table and flow control.
TEST_P(PortalsRule, R_F1_UnallocatedIndexDrops) {
  expect_rule("R-F1");
}
TEST_P(PortalsRule, R_F2_DisabledIndexDropsUntilEnabled) {
  expect_rule("R-F2");
}
TEST_P(PortalsRule, R_F3_NoMatchOrNoHeaderOnAFlowControlledIndexDisablesItOnce) {
  expect_rule("R-F3");
  expect_rule("R-F3-HEADERS");
}
TEST_P(PortalsRule, R_F4_DisabledUntilEnabledAndUnexpectedListKept) {
  expect_rule("R-F4");
}
TEST_P(PortalsRule, R_F5_WithoutFlowControlANoMatchIsOnlyDropped) {
  expect_rule("R-F5");
}
TEST_P(PortalsRule, R_F6_AFullQueueDisablesAFlowControlledIndex) {
  expect_rule("R-F6");
}
TEST_P(PortalsRule, R_F7_PTDisablePostsNothingAndDropsSilently) {
  expect_rule("R-F7");
}

// §6.4 Matching.
TEST_P(PortalsRule, R_M1_MatchBitsAndIgnoreBitsDecide) {
  expect_rule("R-M1");
}
TEST_P(PortalsRule, R_M2_MatchIdNamesTheInitiatorLogicalAndPhysical) {
  expect_rule("R-M2", "logical");
  expect_rule("R-M2", "physical");
}
TEST_P(PortalsRule, R_M3_NoTruncateEntryIsSkippedWhenTheMessageDoesNotFit) {
  expect_rule("R-M3");
}
TEST_P(PortalsRule, R_M4_NonMatchingListEntriesTakeEveryMessageInOrder) {
  expect_rule("R-M4");
}
TEST_P(PortalsRule, R_M5_PriorityListFirstAndTheFirstMatchingEntryTakes) {
  expect_rule("R-M5");
}
TEST_P(PortalsRule, R_M6_PermissionAndOperationViolationsOfTheFirstMatch) {
  expect_rule("R-M6");
}
TEST_P(PortalsRule, R_M7_NoMatchDropsAndCounts) {
  expect_rule("R-M7");
}
TEST_P(PortalsRule, R_M9_UnorderedMatchingStillMatchesBits) {
  expect_rule("R-M9");
}

// §6.5 Offsets, truncation, length.
TEST_P(PortalsRule, R_O1_ManagedLocalOffsetOrTheRemoteOffset) {
  expect_rule("R-O1");
}
TEST_P(PortalsRule, R_O2_TruncatedToTheEntryAndZeroBeyondIt) {
  expect_rule("R-O2");
}
TEST_P(PortalsRule, R_O3_LocalOffsetAdvancesByEachMatchPutsAndGets) {
  expect_rule("R-O3");
}
TEST_P(PortalsRule, R_O4_MinFreeUnlinksAfterTheMatch) {
  expect_rule("R-O4");
}
TEST_P(PortalsRule, R_O5_UnexpectedHeadersDoNotAdvanceTheLocalOffset) {
  expect_rule("R-O5");
}
TEST_P(PortalsRule, R_O6_EventStartAndOffsetsInsideAnIovecEntry) {
  expect_rule("R-O6");
}
TEST_P(PortalsRule, R_O7_IovecRegionsAreContiguousOnBothSides) {
  expect_rule("R-O7");
}

// §6.6 Unexpected messages.
TEST_P(PortalsRule, R_U1_OverflowEntryTakesTheMessageAndKeepsItsHeader) {
  expect_rule("R-U1");
}
TEST_P(PortalsRule, R_U2_AppendClaimsHeadersAsOverflowEventsInArrivalOrder) {
  expect_rule("R-U2");
}
TEST_P(PortalsRule, R_U3_PersistentTakesEveryHeaderUseOnceOne) {
  expect_rule("R-U3");
}
TEST_P(PortalsRule, R_U4_OverflowAppendsAndFailedSearchesKeepHeaders) {
  expect_rule("R-U4");
}
TEST_P(PortalsRule, R_U5_EveryAppendYieldsOverflowEventsOrLink) {
  expect_rule("R-U5");
}
TEST_P(PortalsRule, R_U6_LocalIncByUnexpectedRlengthAndMinFree) {
  expect_rule("R-U6");
}
TEST_P(PortalsRule, R_U7_OverflowEntryAutoUnlinkThenAutoFree) {
  expect_rule("R-U7");
}

// §6.7 Events: generation and suppression.
TEST_P(PortalsRule, R_E1_TargetEventsGoToTheQueueOfTheirIndex) {
  expect_rule("R-E1");
}
TEST_P(PortalsRule, R_E2_CommEventPerMatchUnlessDisabled) {
  expect_rule("R-E2");
}
TEST_P(PortalsRule, R_E3_EachDisableOptionSuppressesItsEvents) {
  expect_rule("R-E3");
}
TEST_P(PortalsRule, R_E4_UseOnceEntryUnlinksAfterItsMatch) {
  expect_rule("R-E4");
}
TEST_P(PortalsRule, R_E5_EventOrderAtOneTargetQueue) {
  expect_rule("R-E5");
}
TEST_P(PortalsRule, R_E6_InitiatorEventsPerOperation) {
  expect_rule("R-E6");
}
TEST_P(PortalsRule, R_E7_SendAndSuccessDisableHideOnlySuccesses) {
  expect_rule("R-E7");
}
TEST_P(PortalsRule, R_E8_SendIsOkAndTargetFailuresComeInTheAck) {
  expect_rule("R-E8");
}
TEST_P(PortalsRule, R_E9_MeaningfulFieldsOfEachEvent) {
  expect_rule("R-E9");
  expect_rule("R-E9", "physical");
}

// §6.8 Acknowledgments.
TEST_P(PortalsRule, R_K1_AckCarriesLengthOffsetListAndFailure) {
  expect_rule("R-K1");
}
TEST_P(PortalsRule, R_K2_CountingAckCountsBytesAndFailures) {
  expect_rule("R-K2");
}
TEST_P(PortalsRule, R_K3_OperationAckCountsOperationsEvenWhenDropped) {
  expect_rule("R-K3");
}
TEST_P(PortalsRule, R_K4_GetsHaveNoAck) {
  expect_rule("R-K4");
}
TEST_P(PortalsRule, R_K5_TheTargetCannotRefuseAnAck) {
  expect_rule("R-K5");
}

// §6.9 Counting events.
TEST_P(PortalsRule, R_C1_SuccessCountsEventsOrBytesFailureCountsOne) {
  expect_rule("R-C1");
}
TEST_P(PortalsRule, R_C2_SendCountsRequestedBytesTheRestMatchedBytes) {
  expect_rule("R-C2");
}
TEST_P(PortalsRule, R_C3_CountingNeedsOnlyTheCounterAndItsOption) {
  expect_rule("R-C3");
}
TEST_P(PortalsRule, R_C4_AWaitEndsOnTheTestOrAnyFailure) {
  expect_rule("R-C4");
}
TEST_P(PortalsRule, R_C5_PollNamesTheLowestSatisfiedOrTimesOut) {
  expect_rule("R-C5");
}
TEST_P(PortalsRule, R_C6_ArrivalsAddToASetCounter) {
  expect_rule("R-C6");
}
TEST_P(PortalsRule, R_C7_IncAndSetReleaseTriggeredOperationsAtOnce) {
  expect_rule("R-C7");
}
TEST_P(PortalsRule, R_C8_OneCounterSharedByAnMDAndAnEntry) {
  expect_rule("R-C8");
}
TEST_P(PortalsRule, R_C9_SearchCountsHeadersFromThePeer) {
  expect_rule("R-C9");
}

// §6.11 Triggered operations: a remote arrival releases them, or they go
// to the remote side.
TEST_P(PortalsRule, R_T1_ReleasedWhenSuccessPlusFailureReachesTheThreshold) {
  expect_rule("R-T1");
}
TEST_P(PortalsRule, R_T2_AThresholdAlreadyReachedReleasesAtOnce) {
  expect_rule("R-T2");
}
TEST_P(PortalsRule, R_T3_TheBufferIsReadAtRelease) {
  expect_rule("R-T3");
}
TEST_P(PortalsRule, R_T4_ReleasedTogetherTheyGoInIssueOrder) {
  expect_rule("R-T4");
}
TEST_P(PortalsRule, R_T5_CounterChaining) {
  expect_rule("R-T5");
}
TEST_P(PortalsRule, R_T6_CancelDestroysPendingOperations) {
  expect_rule("R-T6");
}
TEST_P(PortalsRule, R_T7_FreeingTheCounterDestroysItsOperations) {
  expect_rule("R-T7");
}

// §6.12 Atomics.
TEST_P(PortalsRule, R_A1_TheTargetDoesEveryLegalOperationAndDatatype) {
  expect_rule("R-A1");
}
TEST_P(PortalsRule, R_A2_ElementWiseOperations) {
  expect_rule("R-A2");
}
TEST_P(PortalsRule, R_A3_ConditionalSwapsCompareOperandWithTarget) {
  expect_rule("R-A3");
}
TEST_P(PortalsRule, R_A4_MaskedSwap) {
  expect_rule("R-A4");
}
TEST_P(PortalsRule, R_A5_SwapExchangesTheWholeLength) {
  expect_rule("R-A5");
}
TEST_P(PortalsRule, R_A6_FetchFormsReturnThePriorValue) {
  expect_rule("R-A6");
}
TEST_P(PortalsRule, R_A7_ConcurrentFetchAddsFromTwoRanksLoseNothing) {
  expect_rule("R-A7");
}
TEST_P(PortalsRule, R_A8_FetchAndSwapNeedPutAndGetOnTheEntry) {
  expect_rule("R-A8");
}

// §6.13 Size limits and ordering.
TEST_P(PortalsRule, R_L3_VolatileBufferIsReusableAtReturn) {
  expect_rule("R-L3");
}
TEST_P(PortalsRule, R_L4_SmallWritesAndGetThenPutKeepIssueOrder) {
  expect_rule("R-L4");
}
TEST_P(PortalsRule, R_L5_TheTargetClampsToItsOwnLimits) {
  expect_rule("R-L5");
}

// §6.14 Status registers.
TEST_P(PortalsRule, R_S1_DropCountCountsDropsButNotViolations) {
  expect_rule("R-S1");
}

INSTANTIATE_TEST_SUITE_P(Drivers, PortalsRule, ::testing::Values("shm", "tcp"),
                         [](const auto& cell) { return cell.param; });

}  // namespace
}  // namespace pier::portals::test
