/*
 * chat_probe.cpp - llama.cpp's chat-output parser on given replies: the
 * expectations tests/test_tools_families.c checks polykv's tool-call and
 * reasoning parsing against.  Built by scripts/refs/make_gemma4_tool_refs.sh
 * against llama.cpp's common library beside the project, never by the
 * Makefile: polykv does not link llama.cpp.
 *
 *   chat_probe TEMPLATE.jinja CASES.json OUT.json
 *       CASES.json: {"tools": [OpenAI tools], "cases": [{"name", "text",
 *       "tools": bool, "enable_thinking": bool, "reasoning_format": "auto" |
 *       "none" | "deepseek" | "deepseek-legacy"}, ...]}.  Per case the
 *       template is applied as llama-server applies it (one user message,
 *       the tools when "tools" is true, tool_choice auto, parallel calls on)
 *       to get the parser it picks; the case's text, the model's reply after
 *       the generation prompt, is parsed whole (not partial).  OUT.json: the
 *       cases, each with "format" (the parser's name) and "want": {"content",
 *       "reasoning_content", "tool_calls": [{"name", "arguments"}]}, or
 *       "error" when the parser refuses the text.
 */
#include "chat.h"
#include "nlohmann/json.hpp"

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

using json = nlohmann::ordered_json;

static std::string read_all(const char *path)
{
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(std::string("cannot read ") + path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: chat_probe TEMPLATE.jinja CASES.json OUT.json\n");
        return 2;
    }
    auto tmpls = common_chat_templates_init(nullptr, read_all(argv[1]), "<bos>", "<eos>");
    json in = json::parse(read_all(argv[2]));
    std::vector<common_chat_tool> tools = common_chat_tools_parse_oaicompat(common_json::parse(in.at("tools").dump()));
    json out = json::array();
    for (const auto &c : in.at("cases")) {
        common_chat_templates_inputs inputs;
        common_chat_msg user;
        user.role = "user";
        user.content = "Please help.";
        inputs.messages = { user };
        if (c.value("tools", false)) inputs.tools = tools;
        inputs.parallel_tool_calls = true;
        inputs.enable_thinking = c.value("enable_thinking", true);
        inputs.chat_template_kwargs["enable_thinking"] = inputs.enable_thinking ? "true" : "false";
        auto rf = common_reasoning_format_from_name(c.value("reasoning_format", "auto"));
        inputs.reasoning_format = rf;
        common_chat_params params = common_chat_templates_apply(tmpls.get(), inputs);
        common_chat_parser_params pp(params);
        pp.reasoning_format = rf;
        if (!params.parser.empty()) pp.parser.load(params.parser);
        json r = c;
        r["format"] = common_chat_format_name(params.format);
        try {
            common_chat_msg m = common_chat_parse(c.at("text").get<std::string>(), false, pp);
            json calls = json::array();
            for (const auto &tc : m.tool_calls) calls.push_back({ { "name", tc.name }, { "arguments", tc.arguments } });
            r["want"] = { { "content", m.content }, { "reasoning_content", m.reasoning_content },
                          { "tool_calls", calls } };
        } catch (const std::exception &e) {
            r["error"] = e.what();
        }
        out.push_back(r);
    }
    std::ofstream f(argv[3], std::ios::binary);
    f << out.dump(1, ' ', false) << "\n";
    return f ? 0 : 1;
}
