#include "grammar/builder.h"

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace infercept::grammar {

namespace {

// Adds `text` to the trie rooted at nodes[0]; the end node gets `leaf`, and every node on
// the way `below |= bit`.
void trie_insert(std::vector<TrieNode>& t, const std::string& text, int32_t leaf, uint64_t bit) {
  if (t.empty()) t.emplace_back();
  int32_t cur = 0;
  t[0].below |= bit;
  for (unsigned char c : text) {
    int32_t next = t[(size_t)cur].child(c);
    if (next < 0) {
      next = (int32_t)t.size();
      t.emplace_back();
      auto& kids = t[(size_t)cur].kids;
      kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, INT32_MIN)),
                  {c, next});
    }
    cur = next;
    t[(size_t)cur].below |= bit;
  }
  t[(size_t)cur].leaf = leaf;
}

}  // namespace

int32_t GrammarBuilder::add(Node n) {
  g_.nodes.push_back(std::move(n));
  return (int32_t)g_.nodes.size() - 1;
}

int32_t GrammarBuilder::literal(const std::vector<std::string>& texts) {
  Node n;
  n.kind = NodeKind::literal;
  n.trie.emplace_back();
  for (size_t i = 0; i < texts.size(); ++i) trie_insert(n.trie, texts[i], (int32_t)i, 0);
  return add(std::move(n));
}

int32_t GrammarBuilder::string(int32_t min_len, int32_t max_len, int32_t dfa) {
  Node n;
  n.kind = NodeKind::string;
  n.min_len = min_len;
  n.max_len = max_len;
  n.dfa = dfa;
  return add(std::move(n));
}

int32_t GrammarBuilder::number(bool integer, int32_t dfa) {
  Node n;
  n.kind = NodeKind::number;
  n.integer = integer;
  n.dfa = dfa;
  return add(std::move(n));
}

int32_t GrammarBuilder::add_dfa(ByteDfa d) {
  g_.dfas.push_back(std::move(d));
  return (int32_t)g_.dfas.size() - 1;
}

int32_t GrammarBuilder::object(std::vector<Property> props, int32_t additional) {
  CHECK_LE(props.size(), 64u);
  Node n;
  n.kind = NodeKind::object;
  n.props = std::move(props);
  n.additional = additional;
  n.trie.emplace_back();
  for (size_t i = 0; i < n.props.size(); ++i)
    trie_insert(n.trie,
                nlohmann::json(n.props[i].name)
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                (int32_t)i, uint64_t{1} << i);
  if (additional >= 0) n.key_string = string();
  return add(std::move(n));
}

int32_t GrammarBuilder::array(int32_t items, int64_t min_items, int64_t max_items) {
  Node n;
  n.kind = NodeKind::array;
  n.items = items;
  n.min_items = min_items;
  n.max_items = max_items;
  return add(std::move(n));
}

int32_t GrammarBuilder::choice(std::vector<int32_t> alts) {
  Node n;
  n.kind = NodeKind::choice;
  n.children = std::move(alts);
  return add(std::move(n));
}

int32_t GrammarBuilder::seq(std::vector<int32_t> items) {
  Node n;
  n.kind = NodeKind::seq;
  n.children = std::move(items);
  return add(std::move(n));
}

int32_t GrammarBuilder::repeat(int32_t child, int64_t min, int64_t max) {
  Node n;
  n.kind = NodeKind::repeat;
  n.children = {child};
  n.min_items = min;
  n.max_items = max;
  return add(std::move(n));
}

int32_t GrammarBuilder::ws() {
  Node n;
  n.kind = NodeKind::ws;
  n.max_ws = g_.max_ws;
  return add(std::move(n));
}

int32_t GrammarBuilder::any_value() {
  if (any_value_ >= 0) return any_value_;
  any_value_ = reserve();
  const int32_t obj = any_object();
  const int32_t arr = array(any_value_);
  const int32_t v = choice({obj, arr, string(), number(false), literal({"true", "false", "null"})});
  set_alias(any_value_, v);
  return any_value_;
}

int32_t GrammarBuilder::any_object() {
  if (any_object_ >= 0) return any_object_;
  any_object_ = reserve();
  set_alias(any_object_, object({}, any_value()));
  return any_object_;
}

int32_t GrammarBuilder::reserve() {
  Node n;
  n.kind = NodeKind::alias;
  return add(std::move(n));
}

void GrammarBuilder::set_alias(int32_t node, int32_t target) {
  CHECK(g_.nodes[(size_t)node].kind == NodeKind::alias);
  g_.nodes[(size_t)node].target = target;
}

Result<Grammar> GrammarBuilder::finish(int32_t root) && {
  std::vector<Node>& nodes = g_.nodes;
  const int32_t n_nodes = (int32_t)nodes.size();
  // Aliases to their final targets.
  auto resolve = [&](int32_t i) -> Result<int32_t> {
    for (int32_t hops = 0; hops <= n_nodes; ++hops) {
      if (i < 0 || nodes[(size_t)i].kind != NodeKind::alias) return i;
      i = nodes[(size_t)i].target;
    }
    return make_error("$ref cycle: a definition refers to itself with nothing in between");
  };
  TRY_ASSIGN(root, resolve(root));
  for (Node& n : nodes) {
    if (n.kind == NodeKind::alias) continue;
    for (int32_t& c : n.children) {
      TRY_ASSIGN(c, resolve(c));
    }
    for (Property& p : n.props) {
      TRY_ASSIGN(p.value, resolve(p.value));
    }
    TRY_ASSIGN(n.items, resolve(n.items));
    TRY_ASSIGN(n.additional, resolve(n.additional));
  }
  // Choices flattened: an alternative that is a choice contributes its alternatives.
  for (Node& n : nodes) {
    if (n.kind != NodeKind::choice) continue;
    std::vector<int32_t> flat, stack(n.children.rbegin(), n.children.rend());
    std::vector<uint8_t> seen((size_t)n_nodes, 0);
    while (!stack.empty()) {
      const int32_t c = stack.back();
      stack.pop_back();
      if (seen[(size_t)c]) continue;
      seen[(size_t)c] = 1;
      if (nodes[(size_t)c].kind == NodeKind::choice) {
        for (auto it = nodes[(size_t)c].children.rbegin(); it != nodes[(size_t)c].children.rend();
             ++it)
          stack.push_back(*it);
      } else {
        flat.push_back(c);
      }
    }
    if (flat.empty()) return make_error("anyOf/oneOf with no possible alternative");
    n.children = std::move(flat);
  }
  // Nullable and productive (has a finite instance), to a fixpoint.
  std::vector<uint8_t> productive((size_t)n_nodes, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < n_nodes; ++i) {
      Node& n = nodes[(size_t)i];
      bool p = false, nl = false;
      switch (n.kind) {
        case NodeKind::literal:
          p = !n.trie.empty() && (n.trie[0].leaf >= 0 || !n.trie[0].kids.empty());
          nl = !n.trie.empty() && n.trie[0].leaf >= 0;
          break;
        case NodeKind::string:
        case NodeKind::number:
          p = true;
          break;
        case NodeKind::ws:
          p = nl = true;
          break;
        case NodeKind::object:
          p = true;
          for (const Property& pr : n.props)
            if (pr.required) p = p && productive[(size_t)pr.value];
          break;
        case NodeKind::array:
          p = n.min_items == 0 || productive[(size_t)n.items];
          break;
        case NodeKind::choice:
          for (int32_t c : n.children) {
            p = p || productive[(size_t)c];
            nl = nl || nodes[(size_t)c].nullable;
          }
          break;
        case NodeKind::seq:
          p = nl = true;
          for (int32_t c : n.children) {
            p = p && productive[(size_t)c];
            nl = nl && nodes[(size_t)c].nullable;
          }
          break;
        case NodeKind::repeat:
          p = n.min_items == 0 || productive[(size_t)n.children[0]];
          nl = n.min_items == 0 || nodes[(size_t)n.children[0]].nullable;
          break;
        case NodeKind::alias:
          break;
      }
      if (p != (bool)productive[(size_t)i] || nl != n.nullable) {
        productive[(size_t)i] = p;
        n.nullable = nl;
        changed = true;
      }
    }
  }
  // Every node the root reaches must be productive: otherwise a matcher could enter it and
  // never finish (a recursive $ref with no base case).
  std::vector<uint8_t> reached((size_t)n_nodes, 0);
  std::vector<int32_t> todo{root};
  reached[(size_t)root] = 1;
  while (!todo.empty()) {
    const Node& n = nodes[(size_t)todo.back()];
    if (!productive[(size_t)todo.back()])
      return make_error("the schema has no finite instance (a $ref cycle with no way out)");
    todo.pop_back();
    auto visit = [&](int32_t c) {
      if (c >= 0 && !reached[(size_t)c]) {
        reached[(size_t)c] = 1;
        todo.push_back(c);
      }
    };
    for (int32_t c : n.children) visit(c);
    for (const Property& p : n.props) visit(p.value);
    visit(n.items);
    visit(n.additional);
    visit(n.key_string);
  }
  for (const Node& n : nodes)
    if (n.kind == NodeKind::repeat && nodes[(size_t)n.children[0]].nullable)
      return make_error("a repeated construct that may be empty");  // it could loop unread
  // An array whose items cannot be written can only be empty; a choice drops alternatives
  // that cannot be finished.
  for (Node& n : nodes) {
    if (n.kind == NodeKind::array && !productive[(size_t)n.items]) n.max_items = 0;
    if (n.kind == NodeKind::choice)
      std::erase_if(n.children, [&](int32_t c) { return !productive[(size_t)c]; });
  }
  // Objects: from property i on, which keys may come (i up to the first required one) and
  // whether the object may close.
  for (Node& n : nodes) {
    if (n.kind != NodeKind::object) continue;
    const int32_t np = (int32_t)n.props.size();
    // An optional property whose value cannot be written is never offered.
    n.may_close.assign((size_t)np + 1, 1);
    n.last_key.assign((size_t)np, np - 1);
    for (int32_t i = np - 1; i >= 0; --i) {
      n.may_close[(size_t)i] = n.may_close[(size_t)i + 1] && !n.props[(size_t)i].required;
      n.last_key[(size_t)i] =
          n.props[(size_t)i].required ? i : (i + 1 < np ? n.last_key[(size_t)i + 1] : np - 1);
    }
    for (int32_t i = 0; i < np; ++i)
      if (!productive[(size_t)n.props[(size_t)i].value]) {
        // (required ones were refused above; drop an optional one from the key trie)
        for (TrieNode& t : n.trie) t.below &= ~(uint64_t{1} << i);
      }
  }
  g_.root = root;
  return std::move(g_);
}

}  // namespace infercept::grammar
