// `infercept render-template`: renders a Jinja chat template with a JSON context, the way the
// server renders the model's own template. tests/chat_template_jinja_test.py compares its
// output with Python's jinja2 (in transformers' environment) on real models' templates.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/template.h"

namespace infercept::cli {
namespace {

Result<std::string> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int run_render_template(int argc, char** argv) {
  CLI::App app{
      "Renders a Jinja chat template with the variables of a JSON object (messages, tools, "
      "add_generation_prompt, bos_token, ...) and prints the text.",
      "infercept render-template"};
  set_up_app(app, "infercept render-template --template qwen.jinja --context conversation.json");
  std::string template_path, context_path;
  bool spans = false;
  app.add_option("--template", template_path, "the template file (Jinja)")->required();
  app.add_option("--context", context_path, "a JSON object: the template's variables")->required();
  app.add_flag("--spans", spans,
               "print {\"text\", \"literal\": [[begin, end], ...]} instead: the byte ranges "
               "that came from the context's strings");
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  auto source = read_all(template_path);
  if (!source.ok()) return fail(source.error());
  auto context_text = read_all(context_path);
  if (!context_text.ok()) return fail(context_text.error());
  auto tmpl = jinja::Template::parse(*source);
  if (!tmpl.ok()) return fail(tmpl.error());
  auto context = jinja::from_json(*context_text, /*tainted=*/true);
  if (!context.ok()) return fail(make_error("--context: ", context.error().message));
  if (!context->is_dict()) return fail(make_error("--context: expected a JSON object"));
  auto out = tmpl->render(context->dict());
  if (!out.ok()) return fail(out.error());
  if (spans) {
    nlohmann::json j;
    j["text"] = out->text;
    j["literal"] = nlohmann::json::array();
    for (const TextSpan& s : out->taint) j["literal"].push_back({s.begin, s.end});
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fwrite(out->text.data(), 1, out->text.size(), stdout);
  }
  return 0;
}

}  // namespace infercept::cli
