// tests/launch: the PMI-1 / PMI-2 wire codecs, with golden strings and
// hostile input.
#include "boot/pmi_wire.hpp"

#include <gtest/gtest.h>

namespace pier::boot::pmi {
namespace {

TEST(PmiWire, ParsesAPmi1Line) {
  auto c = parse_v1("cmd=put kvsname=kvs_1 key=a value=b=c");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "put");
  ASSERT_EQ(c->pairs.size(), 3u);
  EXPECT_EQ(*c->find("kvsname"), "kvs_1");
  EXPECT_EQ(*c->find("value"), "b=c");
  EXPECT_EQ(c->find("missing"), nullptr);
}

TEST(PmiWire, Pmi1WordsWithoutEqualsContinueTheValue) {
  auto c = parse_v1("cmd=abort exitcode=3 message=it went  wrong");
  ASSERT_TRUE(c);
  EXPECT_EQ(*c->find("message"), "it went wrong");
}

TEST(PmiWire, RejectsMalformedPmi1) {
  EXPECT_EQ(parse_v1("").status(), Status::malformed);
  EXPECT_EQ(parse_v1("put key=a").status(), Status::malformed);
  EXPECT_EQ(parse_v1("key=a cmd=put").status(), Status::malformed);
  EXPECT_EQ(parse_v1("cmd= key=a").status(), Status::malformed);
  EXPECT_EQ(parse_v1("cmd=put =a").status(), Status::malformed);
  EXPECT_EQ(parse_v1(std::string(max_message + 1, 'x')).status(), Status::malformed);
}

TEST(PmiWire, FormatsPmi1) {
  Command c;
  c.name = "get_result";
  c.add("rc", "0").add("value", "v");
  auto text = format_v1(c);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "cmd=get_result rc=0 value=v\n");
  c.add("msg", "has space");
  EXPECT_EQ(format_v1(c).status(), Status::invalid_argument);
}

TEST(PmiWire, Pmi2RoundTripEscapesSemicolons) {
  Command c;
  c.name = "kvs-put";
  c.add("key", "k").add("value", "a;b;;c");
  auto text = format_v2(c);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "    34cmd=kvs-put;key=k;value=a;;b;;;;c;");
  auto back = parse_v2(std::string_view(*text).substr(v2_prefix));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, "kvs-put");
  EXPECT_EQ(*back->find("value"), "a;b;;c");
}

TEST(PmiWire, ParsesMpichFullinit) {
  auto c = parse_v2("cmd=fullinit;pmirank=3;threaded=FALSE;");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "fullinit");
  EXPECT_EQ(*c->find("pmirank"), "3");
  EXPECT_EQ(*c->find("threaded"), "FALSE");
}

TEST(PmiWire, RejectsMalformedPmi2) {
  EXPECT_EQ(parse_v2("").status(), Status::malformed);
  EXPECT_EQ(parse_v2("key=a;").status(), Status::malformed);
  EXPECT_EQ(parse_v2("cmd=x;noequals;").status(), Status::malformed);
  EXPECT_EQ(parse_v2("cmd=x;=v;").status(), Status::malformed);
  EXPECT_EQ(parse_v2("cmd=;").status(), Status::malformed);
}

TEST(PmiWire, ReaderSwitchesFramingPerMessage) {
  Reader r;
  r.append("cmd=init pmi_version=2 pmi_subversion=0\n    13cmd=finalize;");
  auto m = r.next();
  ASSERT_TRUE(m && *m);
  EXPECT_EQ((*m)->framing, Framing::v1);
  EXPECT_EQ((*m)->text, "cmd=init pmi_version=2 pmi_subversion=0");
  m = r.next();
  ASSERT_TRUE(m && *m);
  EXPECT_EQ((*m)->framing, Framing::v2);
  EXPECT_EQ((*m)->text, "cmd=finalize;");
  m = r.next();
  ASSERT_TRUE(m);
  EXPECT_FALSE(*m);
}

TEST(PmiWire, ReaderWaitsForPartialMessagesByteByByte) {
  const std::string stream = "cmd=barrier_in\n13    cmd=finalize;";
  Reader r;
  int messages = 0;
  for (char ch : stream) {
    r.append(std::string_view(&ch, 1));
    auto m = r.next();
    ASSERT_TRUE(m) << "after byte '" << ch << "'";
    messages += m->has_value();
  }
  EXPECT_EQ(messages, 2);
  EXPECT_EQ(r.pending(), 0u);
}

TEST(PmiWire, ReaderJoinsAMultiLineCommandUpToEndcmd) {
  const std::string stream =
      "mcmd=spawn\nnprocs=2\nexecname=/bin/true\narg1=a b\nendcmd\ncmd=barrier_in\n";
  Reader r;
  std::vector<std::string> got;
  for (char ch : stream) {  // byte by byte: a block is never cut early
    r.append(std::string_view(&ch, 1));
    auto m = r.next();
    ASSERT_TRUE(m);
    if (*m) got.push_back((*m)->text);
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "mcmd=spawn nprocs=2 execname=/bin/true arg1=a b");
  EXPECT_EQ(got[1], "cmd=barrier_in");
  auto c = parse_v1(got[0]);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "spawn");
  ASSERT_NE(c->find("arg1"), nullptr);
  EXPECT_EQ(*c->find("arg1"), "a b");
  Reader endless;
  endless.append("mcmd=spawn\n" + std::string(max_message, 'a') + "\n");
  EXPECT_FALSE(endless.next()) << "a block without endcmd is bounded";
}

TEST(PmiWire, ReaderRejectsHostileStreams) {
  for (std::string bad : {"xyz\n", "   abc", "000000", "  1 2 cmd=x", "999999"}) {
    Reader r;
    r.append(bad);
    auto m = r.next();
    EXPECT_FALSE(m) << bad;
  }
  Reader endless;
  endless.append("cmd=" + std::string(max_message + 1, 'a'));
  EXPECT_FALSE(endless.next());
}

}  // namespace
}  // namespace pier::boot::pmi
