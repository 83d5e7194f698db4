# src/chart: charts as inline SVG and the HTML page around them, drawn by our own small code
# (svg_chart.h): `leanemb report` (src/serve/report.cc) and `leanemb plan --html`
# (src/plan/report_html.cc) share it.
target_sources(leanemb PRIVATE ${CMAKE_CURRENT_LIST_DIR}/svg_chart.cc)

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(chart_test ${CMAKE_CURRENT_LIST_DIR}/chart_test.cc)
endif()
