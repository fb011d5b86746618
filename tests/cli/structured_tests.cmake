# `deepinfer generate` with structured output (issue 13), on the embedded default model.

add_test(NAME cli.structured.help COMMAND ${deepinfer_bin} generate --help)
set_tests_properties(cli.structured.help PROPERTIES PASS_REGULAR_EXPRESSION
                     "--json-schema FILE .*--json-object .*--regex R .*--choice A,B,C .*--tool-choice")
# One sample each: the printed text is the whole output.
add_test(NAME cli.structured.choice COMMAND ${deepinfer_bin} generate --prompt-ids 0 --max-tokens 20 --temperature 1
                                            --choice "yes,no,maybe later")
set_tests_properties(cli.structured.choice PROPERTIES PASS_REGULAR_EXPRESSION "^(yes|no|maybe later)\n$")
add_test(NAME cli.structured.regex COMMAND ${deepinfer_bin} generate --prompt-ids 0 --max-tokens 20 --temperature 1
                                           --regex "[0-9]{3}-[a-z]{2}")
set_tests_properties(cli.structured.regex PROPERTIES PASS_REGULAR_EXPRESSION "^[0-9][0-9][0-9]-[a-z][a-z]\n$")
# The random model rarely closes a string, so only the start is checked here (the schema samples
# test validates whole objects).
add_test(NAME cli.structured.json_object COMMAND ${deepinfer_bin} generate --prompt-ids 0 --max-tokens 8
                                                 --temperature 1 --json-object)
set_tests_properties(cli.structured.json_object PROPERTIES PASS_REGULAR_EXPRESSION "^[ \n\t]*{")

# Errors: one line naming the flag and what is wrong.
set(structured_data ${CMAKE_CURRENT_SOURCE_DIR}/data/structured/cli)
function(deepinfer_structured_error name regex)
  add_test(NAME cli.structured.${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh "${regex}"
                                               $<TARGET_FILE:deepinfer> generate --prompt-ids 0 --max-tokens 4 ${ARGN})
endfunction()
deepinfer_structured_error(unsupported_keyword
                           "^error: generate: --json-schema: .*#/properties/tags: unsupported JSON Schema keyword \"uniqueItems\"$"
                           --json-schema ${structured_data}/unsupported_keyword.json)
deepinfer_structured_error(deep_schema "^error: --json-schema: .*/deep_schema[.]json: JSON nested deeper than 128 levels [(]at /items/items/"
                           --json-schema ${structured_data}/deep_schema.json)
# 16 levels of inline arrays: too many states, and the error says how to write it with $ref.
deepinfer_structured_error(deep_inline_schema "^error: generate: --json-schema: .*too deeply .*[$]defs and [$]ref it"
                           --json-schema ${structured_data}/deep_inline.json)
deepinfer_structured_error(schema_not_json "^error: --json-schema: /etc/passwd: not valid JSON: "
                           --json-schema /etc/passwd)
deepinfer_structured_error(schema_directory "^error: --json-schema: /etc: not a regular file [(]a directory[)]$"
                           --json-schema /etc)
deepinfer_structured_error(bad_regex "^error: generate: --regex: .*"
                           --regex "a(b")
deepinfer_structured_error(two_sources "^error: generate: give at most one of --json-schema, --json-object, --regex, --choice and --tool-choice$"
                           --regex a --choice a,b)
deepinfer_structured_error(n_without_jsonl "^error: generate: --n > 1 prints its choices with --jsonl$"
                           --choice a,b --n 2)

# Acceptance "valid output": 20 samples at temperature 1 for each of the >= 40 schemas in
# tests/data/structured/schemas, validated by python3-jsonschema (tools/setup.sh installs it), on
# the random golden model tiny-a (the script says why not the trained default).
add_test(NAME structured.schema_samples
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/structured/schema_samples_test.py ${deepinfer_bin} ${PROJECT_SOURCE_DIR}
                 --model ${PROJECT_SOURCE_DIR}/tests/data/models/tiny-a)
set_tests_properties(structured.schema_samples PROPERTIES TIMEOUT 900 PROCESSORS 2)
