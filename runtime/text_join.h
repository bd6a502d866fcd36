// Lists as text: the items of a range with a separator between them (group names, error messages,
// reports), bare or between brackets.
#pragma once
#include <string>
#include <string_view>
#include <type_traits>

namespace tetra {

// text(item) of every item of `items`, with `sep` between them; "" for no items.
template <class Range, class Text>
std::string join_text(const Range& items, std::string_view sep, Text text) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += sep;
    first = false;
    out += text(item);
  }
  return out;
}

// The same with numbers as std::to_string writes them and strings as they are.
template <class Range>
std::string join_text(const Range& items, std::string_view sep) {
  return join_text(items, sep, [](const auto& item) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(item)>>)
      return std::to_string(item);
    else
      return std::string(item);
  });
}

// The same between brackets, "[a, b]": the one place lists are bracketed, built by appending (GCC 12
// warns falsely, -Wrestrict, on "[" + std::string).
template <class Range, class... Text>
std::string bracketed_text(const Range& items, std::string_view sep, Text... text) {
  std::string out = "[";
  (out += join_text(items, sep, text...)) += "]";
  return out;
}

}  // namespace tetra
