# One KaaS VM image for EC2: Java runtime, ZooKeeper server, Kafka broker with the Jolokia
# JVM agent, and kaas-agent as a systemd service. The JVM artifacts are fetched by the same
# Maven file (pom.xml) the local image uses, and laid out by the same provision.sh.
#
#   packer build -var region=eu-west-1 -var agent_wheel=dist/kaas-0.1.0-py3-none-any.whl packer/kaas-vm.pkr.hcl

variable "region" {
  type    = string
  default = "eu-west-1"
}

variable "instance_type" {
  type    = string
  default = "m6i.large"
}

variable "source_ami_owner" {
  type        = string
  description = "Debian's AWS account, owner of the official Debian 12 images."
  default     = "136693071363"
}

variable "agent_wheel" {
  type        = string
  description = "Path of the kaas wheel (python -m build); /opt/kaas/venv gets it with its agent extra only."
}

locals {
  timestamp = formatdate("YYYYMMDDhhmmss", timestamp())
}

source "amazon-ebs" "kaas_vm" {
  region        = var.region
  instance_type = var.instance_type
  ssh_username  = "admin"
  ami_name      = "kaas-vm-${local.timestamp}"

  source_ami_filter {
    filters = {
      name                = "debian-12-amd64-*"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = [var.source_ami_owner]
    most_recent = true
  }

  tags = {
    Name         = "kaas-vm"
    "kaas:role"  = "image"
    "kaas:built" = local.timestamp
  }
}

build {
  sources = ["source.amazon-ebs.kaas_vm"]

  provisioner "shell" {
    inline = [
      "sudo apt-get update -q",
      "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven openjdk-17-jdk-headless",
      "mkdir -p /tmp/kaas/packer/scripts /tmp/kaas/systemd",
    ]
  }

  provisioner "file" {
    source      = "${path.root}/../constraints.txt"
    destination = "/tmp/kaas/constraints.txt"
  }

  provisioner "file" {
    sources     = ["${path.root}/pom.xml", "${path.root}/maven-settings.xml"]
    destination = "/tmp/kaas/packer/"
  }

  provisioner "file" {
    sources     = ["${path.root}/scripts/fetch-artifacts.sh", "${path.root}/scripts/provision.sh"]
    destination = "/tmp/kaas/packer/scripts/"
  }

  provisioner "file" {
    sources     = ["${path.root}/../systemd/kaas-agent.service", "${path.root}/../systemd/kaas-kafka.service", "${path.root}/../systemd/kaas-zookeeper.service", "${path.root}/../systemd/kaas-controller.service", "${path.root}/../systemd/kaas-mirror-maker.service", "${path.root}/../systemd/kaas-boot-identity.service"]
    destination = "/tmp/kaas/systemd/"
  }

  provisioner "file" {
    source      = var.agent_wheel
    destination = "/tmp/kaas/"
  }

  provisioner "shell" {
    inline = [
      "bash /tmp/kaas/packer/scripts/fetch-artifacts.sh /tmp/kaas/jvm",
      "sudo bash /tmp/kaas/packer/scripts/provision.sh --root / --artifacts /tmp/kaas/jvm --system --agent-wheel /tmp/kaas/${basename(var.agent_wheel)} --constraints /tmp/kaas/constraints.txt",
      "rm -rf /tmp/kaas",
    ]
  }
}
