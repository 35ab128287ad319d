"""``-o jsonpath`` against the examples of kubectl's JSONPath reference
(https://kubernetes.io/docs/reference/kubectl/jsonpath/), with the results it lists."""

from __future__ import annotations

import pytest

from joulectl.cli.jsonpath import TemplateError, execute

#: the reference's input document, as it prints it
DOC = {
    "kind": "List",
    "items": [
        {"kind": "None", "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
         "status": {"capacity": {"cpu": "4"}, "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}]}},
        {"kind": "None", "metadata": {"name": "127.0.0.2"},
         "status": {"capacity": {"cpu": "8"}, "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.2"},
                                                            {"type": "another", "address": "127.0.0.3"}]}},
    ],
    "users": [{"name": "myself", "user": {}}, {"name": "e2e", "user": {"username": "admin", "password": "secret"}}],
}


@pytest.mark.parametrize(("template", "result"), [
    ("{.kind}", "List"),
    ("{['kind']}", "List"),
    ("{..name}", "127.0.0.1 127.0.0.2 myself e2e"),
    ("{.items[*].metadata.name}", "127.0.0.1 127.0.0.2"),
    ("{.users[0].name}", "myself"),
    ('{.users[?(@.name=="e2e")].user.password}', "secret"),
    ("{.items[0].metadata.labels.kubernetes\\.io/hostname}", "127.0.0.1"),
    # the reference prints the maps in Go's old map[cpu:4] form; kubectl since 1.23 prints JSON
    ("{range .items[*]}[{.metadata.name}, {.status.capacity}] {end}",
     '[127.0.0.1, {"cpu":"4"}] [127.0.0.2, {"cpu":"8"}] '),
    ("{.items[*].status.addresses[?(@.type=='another')].address}", "127.0.0.3"),
    ('{range .items[*]}{.metadata.name}{"\\t"}{.status.capacity.cpu}{"\\n"}{end}', "127.0.0.1\t4\n127.0.0.2\t8\n"),
    ("{.items[-1].metadata.name}", "127.0.0.2"),
    ("{.items[0:1].metadata.name}", "127.0.0.1"),
    ("{.items[0,1].status.capacity.cpu}", "4 8"),
    ("{.users[*].user.username}", "admin"),
    ("{.nosuch}", ""),
    ("nodes: {.items[*].metadata.name}!", "nodes: 127.0.0.1 127.0.0.2!"),
    ("{$.kind}", "List"),
])
def test_the_reference_examples(template: str, result: str) -> None:
    assert execute(template, DOC) == result


@pytest.mark.parametrize(("template", "message"), [
    ("{.items[", "unclosed action: a '{' has no '}'"),
    ("{range .items[*]}{.kind}", "unclosed range: {range ...} needs an {end}"),
    ("{end}", "not in range, nothing to end"),
    ("{.kind!}", "unrecognized character in action: '!'"),
    ("{}", "empty action {}"),
    ("{.items[x]}", "invalid array index [x]"),
    ("{.items[1:2:0]}", "invalid array slice [1:2:0]: step 0"),
    ("{.items[?@.kind]}", "a filter is [?(...)], got [?@.kind]"),
])
def test_bad_templates_name_the_problem(template: str, message: str) -> None:
    with pytest.raises(TemplateError) as e:
        execute(template, DOC)
    assert str(e.value) == message
