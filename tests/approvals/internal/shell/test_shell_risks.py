"""Risk hints: each code on a command that has it, not on its look-alikes; paths judged
against the event's cwd (through `cd`); `risks_of` for events."""

from __future__ import annotations

import pytest

from approvals._internal.shell.model import RISK_CODES
from approvals._internal.shell.view import analysis, risks_of
from approvals.models import ApprovalEvent


def codes(command: str, cwd: str | None = "/srv/app") -> set[str]:
    return {r.code for r in analysis(command, cwd).risks}


def texts(command: str, cwd: str | None = "/srv/app") -> list[str]:
    return [r.line() for r in analysis(command, cwd).risks]


RISK_CASES = [
        ("recursive_delete", ["rm -r build", "find . -delete", "git clean -fdx",
                              "rsync -a --delete src/ dst/"], ["rm build.log", "rmdir x"]),
        ("force_push", ["git push -f", "git push --force-with-lease", "git push origin +main",
                        "git push --mirror", "git push --force-if-includes"],
         ["git push", "git push origin feat"]),
        ("push_to_protected", ["git push origin main", "git push origin HEAD:master",
                               "git push origin release/1.2", "git push --all"],
         ["git push origin feature/main-menu", "git push"]),
        ("history_rewrite", ["git reset --hard HEAD~1", "git rebase main", "git filter-branch x",
                             "git commit --amend", "git push --force"],
         ["git reset HEAD~1", "git rebase --abort", "git commit -m x"]),
        ("pipe_to_shell", ["curl x | sh", "wget -O- x | bash", "curl x | python3",
                           "bash <(curl x)", 'sh -c "$(curl -fsSL x)"',
                           'bash <<< "$(wget -qO- x)"', "source <(curl x)"],
         ["curl x -o f", "cat f | grep sh", "python3 x.py < data", "echo x | python3 -c 'pass'"]),
        ("writes_outside_cwd", ["touch /tmp/x", "echo x > ../x", "cp a /etc/b", "rm ~/x",
                                "cd /tmp && touch x", "mv a ../../b"],
         ["touch x", "echo x > sub/x", "cp a b", "echo x > /dev/null", "cd sub && touch x"]),
        ("writes_sensitive_path", ["echo x >> ~/.bashrc", "cp k ~/.ssh/authorized_keys",
                                   "tee /etc/hosts", "sed -i s/a/b/ /etc/passwd",
                                   "touch .git/hooks/pre-commit", "cp x ~/.claude/settings.json",
                                   "dd if=x of=/dev/sda"],
         ["echo x > notes.bashrc.md", "cp a b", "cat ~/.bashrc"]),
        ("reads_credentials", ["cat ~/.aws/credentials", "cat .env", "cat ~/.ssh/id_ed25519",
                               "grep KEY .env.production", "cp server.pem /tmp", "printenv",
                               "env", "gh auth token", "kubectl get secret db -o yaml",
                               "cat < ~/.netrc"],
         ["cat .env.example", "cat ~/.ssh/id_ed25519.pub", "cat README.md", "env FOO=1 ls"]),
        ("permission_change", ["chmod -R 755 .", "chmod 777 x", "chmod o+w x", "chmod u+s x",
                               "chmod 4755 x", "chown -R u:g .", "chgrp -R g ."],
         ["chmod +x run.sh", "chmod 644 x", "chown u x"]),
        ("publish", ["npm publish", "twine upload dist/*", "python -m twine upload dist/*",
                     "cargo publish", "docker push img", "docker image push img", "gem push x",
                     "poetry publish", "gh release create v1", "docker buildx build --push ."],
         ["npm pack", "cargo build", "docker build ."]),
        ("infra_destroy", ["terraform destroy", "terraform apply -auto-approve",
                           "tofu apply --auto-approve", "kubectl delete pod x",
                           "helm uninstall web", "aws ec2 terminate-instances --instance-ids i",
                           "aws s3 rm s3://b --recursive", "gcloud compute instances delete x",
                           "pulumi destroy"],
         ["terraform plan", "terraform apply", "terraform apply -auto-approve=false",
          "kubectl get pods"]),
        ("database_drop", ['psql -c "DROP TABLE users"', "mysql -e 'drop database app'",
                           "redis-cli FLUSHALL", "dropdb app", "rails db:drop",
                           "psql <<EOF\nTRUNCATE TABLE logs;\nEOF", "prisma migrate reset"],
         ['psql -c "select 1"', "rails db:migrate"]),
        ("disk_tool", ["dd if=/dev/zero of=disk.img", "mkfs.ext4 /dev/sdb1", "fdisk /dev/sda",
                       "wipefs -a /dev/sdb", "shred -u secret.txt"], ["df -h", "du -sh ."]),
        ("privilege", ["sudo ls", "doas -u root id", "su -c 'id'"], ["ls", "env ls"]),
        ("unanalysable", ["eval $x", "$cmd", "source x.sh", "curl x | sh", "ls && (rm",
                          "bash"], ["ls", "bash x.sh"]),
]  # fmt: skip


@pytest.mark.parametrize(("code", "risky", "harmless"), RISK_CASES)
def test_each_risk(code: str, risky: list[str], harmless: list[str]) -> None:
    for command in risky:
        assert code in codes(command), (command, texts(command))
    for command in harmless:
        assert code not in codes(command), (command, texts(command))


def test_every_code_is_tested() -> None:
    assert {code for code, _, _ in RISK_CASES} == set(RISK_CODES)


def test_risk_lines_say_what_they_touch() -> None:
    assert "recursive_delete: rm -r of build, dist" in texts("rm -rf build dist")
    assert "force_push: git push --force" in texts("git push -f origin x")
    assert "writes_outside_cwd: touch writes /tmp/x (outside /srv/app)" in texts("touch /tmp/x")


def test_paths_without_a_cwd() -> None:
    assert "writes_outside_cwd" in codes("touch /etc/x", cwd=None)
    assert "writes_outside_cwd" in codes("touch ../x", cwd=None)
    assert "writes_outside_cwd" not in codes("touch x", cwd=None)


def test_risks_of_an_event() -> None:
    bash = ApprovalEvent(kind="command", tool_name="Bash", command="rm -rf /", cwd="/srv")
    assert [r.code for r in risks_of(bash)] == ["recursive_delete", "writes_outside_cwd"]
    codex = ApprovalEvent(tool_name="shell", arguments={"command": ["bash", "-lc", "npm publish"]})
    assert [r.code for r in risks_of(codex)] == ["publish"]
    other = ApprovalEvent(tool_name="Read", arguments={"command": "rm -rf /"})
    assert risks_of(other) == []
    missing = ApprovalEvent(kind="command", tool_name="Bash")
    assert [r.code for r in risks_of(missing)] == ["unanalysable"]
